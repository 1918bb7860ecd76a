import { randomUUID } from 'node:crypto';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { buildService, loadConfig, type BuiltService } from '@labelflow/service-kit';
import { as, buildTestService, eventually, freshSnowflake, queryRows, refusal, tokenFor, type InProcessService, type TestIdentity } from '@labelflow/testing';
import { TaskSvcConfig } from '../config';
import { taskService } from '../service';

const infra = inject('infra');
const NDJSON = { 'content-type': 'application/x-ndjson' };

interface Summary {
  readonly importId: string;
  readonly status: string;
  readonly lines: number;
  readonly created: number;
  readonly alreadyPresent: number;
  readonly rejected: number;
  readonly errors: readonly { line: number; code: string; message: string }[];
  readonly errorsTruncated: boolean;
  readonly uploads: number;
  readonly completedAt: string | null;
}

const project: string = randomUUID();
const elsewhere: string = randomUUID();
const manager = as.manager('mgr-1', project);
const annotator = as.annotator('ann-1', project);
const stranger = as.manager('mgr-elsewhere', elsewhere);

const line = (externalId: string, title = `task ${externalId}`) => JSON.stringify({ externalId, title, dataUri: `s3://bucket/${externalId}.jpg` });
const file = (lines: readonly string[]) => `${lines.join('\n')}\n`;

/** An upload over a real socket, its body written as the test decides: for cut-off and concurrent uploads. */
function streamingUpload(baseUrl: string, path: string, identity: TestIdentity) {
  const request = http.request(`${baseUrl}${path}`, { method: 'POST', headers: { ...NDJSON, 'transfer-encoding': 'chunked' } });
  const answer = new Promise<{ status: number; body: unknown }>((resolve, reject) => {
    request.on('response', (response) => {
      let text = '';
      response.setEncoding('utf8');
      response.on('data', (chunk: string) => (text += chunk));
      response.on('end', () => resolve({ status: response.statusCode ?? 0, body: text ? JSON.parse(text) : undefined }));
    });
    request.on('error', reject);
  });
  return {
    async start() {
      request.setHeader('authorization', `Bearer ${await tokenFor(identity)}`);
    },
    write: (text: string) => new Promise<void>((resolve, reject) => request.write(text, (error) => (error ? reject(error) : resolve()))),
    end: () => request.end(),
    cutOff: () => request.destroy(),
    answer,
  };
}

describe('task-svc bulk import, answered in-process', () => {
  let svc: InProcessService<BuiltService<TaskSvcConfig>>;
  let baseUrl: string;
  let locker: pg.Client | undefined;

  beforeAll(async () => {
    // Small batches, so a short file spans several transactions; a short lock timeout, so a locked table fails fast.
    svc = await buildTestService(infra, 'task-svc', (env) => buildService(taskService, loadConfig(TaskSvcConfig, env)), {
      IMPORT_BATCH_SIZE: '5',
      IMPORT_BATCH_ATTEMPTS: '2',
      IMPORT_LOCK_TIMEOUT_MS: '200',
    });
    await svc.built.app.listen({ port: 0, host: '127.0.0.1' });
    baseUrl = `http://127.0.0.1:${(svc.built.app.server.address() as AddressInfo).port}`;
  });
  afterAll(async () => {
    await locker?.end().catch(() => undefined);
    await svc?.close();
  });

  const upload = (importId: string, body: string, by: TestIdentity = manager, projectId = project) =>
    svc.http(by).post<Summary>(`/projects/${projectId}/tasks/import?importId=${importId}`, body, NDJSON);
  const progress = (importId: string, by: TestIdentity = manager, projectId = project) => svc.http(by).get<Summary>(`/projects/${projectId}/imports/${importId}`);
  const tasksOf = (projectId: string) =>
    queryRows<{ task_id: string; external_id: string; title: string; task_number: string; status: string }>(svc.databaseUrl, 'SELECT task_id, external_id, title, task_number, status FROM tasks WHERE project_id = $1', [projectId]);
  const createdEventsOf = (projectId: string) =>
    queryRows<{ message_key: string; payload: { payload: { externalId?: string; taskNumber?: string; createdBy?: string } } }>(
      svc.databaseUrl,
      `SELECT message_key, payload FROM outbox_messages WHERE event_type = 'TaskCreated' AND payload->>'projectId' = $1`,
      [projectId],
    );

  it('starts each imported task on a trace of its own, not that of the upload request, and says where it came from', async () => {
    const projectId = randomUUID();
    const importId = randomUUID();
    const traceparent = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01';
    const answer = await svc.http(as.owner('own-1', projectId)).post<Summary>(`/projects/${projectId}/tasks/import?importId=${importId}`, file([line('t1'), line('t2'), line('t3')]), { ...NDJSON, traceparent });
    expect(answer.status, JSON.stringify(answer.body)).toBe(200);
    const rows = await queryRows<{ headers: Record<string, string>; payload: { causationId?: string } }>(
      svc.databaseUrl,
      `SELECT headers, payload FROM outbox_messages WHERE event_type = 'TaskCreated' AND payload->>'projectId' = $1`,
      [projectId],
    );
    expect(rows).toHaveLength(3);
    for (const row of rows) {
      expect(row.headers).not.toHaveProperty('traceparent');
      expect(row.payload.causationId).toBe(`import:${importId}`);
    }
  });

  it('creates one task per distinct valid external id, one TaskCreated each, and reports bad lines by number', async () => {
    const projectId = randomUUID();
    const lines = [line('a'), line('b'), '', 'not json', line('a', 'a again, other title'), '{"externalId":"c","title":"t"}', line('c'), ...Array.from({ length: 12 }, (_, i) => line(`n${i}`)), line('b')];
    const answer = await upload(randomUUID(), file(lines), as.manager('mgr-1', projectId), projectId);
    expect(answer.status, JSON.stringify(answer.body)).toBe(200);
    expect(answer.body).toMatchObject({ status: 'completed', lines: 19, created: 15, alreadyPresent: 2, rejected: 2, errorsTruncated: false, uploads: 1 });
    expect(answer.body.errors.map((e) => [e.line, e.code])).toEqual([
      [4, 'INVALID_JSON'],
      [6, 'VALIDATION_FAILED'],
    ]);
    const tasks = await tasksOf(projectId);
    expect(tasks).toHaveLength(15);
    expect(new Set(tasks.map((t) => t.external_id)).size).toBe(15);
    expect(tasks.find((t) => t.external_id === 'a')?.title).toBe('task a');
    expect(new Set(tasks.map((t) => t.task_number)).size).toBe(15);
    expect(tasks.every((t) => t.status === 'open' && /^TASK-[1-9][0-9]*$/.test(t.task_number))).toBe(true);
    const events = await createdEventsOf(projectId);
    expect(events.map((e) => e.message_key).sort()).toEqual(tasks.map((t) => t.task_id).sort());
    expect(events.every((e) => e.payload.payload.createdBy === 'mgr-1' && e.payload.payload.externalId !== undefined)).toBe(true);
  });

  it('creates nothing on a re-upload, under the same importId or a new one', async () => {
    const importId = randomUUID();
    const body = file([line('r1'), line('r2'), 'oops', line('r3')]);
    const first = await upload(importId, body);
    expect(first.body).toMatchObject({ status: 'completed', lines: 4, created: 3, alreadyPresent: 0, rejected: 1 });
    const again = await upload(importId, body);
    expect(again.status).toBe(200);
    expect(again.body).toMatchObject({ status: 'completed', lines: 4, created: 3, alreadyPresent: 0, rejected: 1, uploads: 2 });
    expect(again.body.completedAt).toBe(first.body.completedAt);
    const anew = await upload(randomUUID(), body);
    expect(anew.body).toMatchObject({ status: 'completed', lines: 4, created: 0, alreadyPresent: 3, rejected: 1 });
    expect((await tasksOf(project)).filter((t) => t.external_id.startsWith('r'))).toHaveLength(3);
  });

  it('refuses a re-upload under the same importId of a file that differs in the lines already imported', async () => {
    const importId = randomUUID();
    expect((await upload(importId, file([line('m1'), line('m2')]))).status).toBe(200);
    const other = await upload(importId, file([line('m1'), line('m9')]));
    expect(refusal(other)).toEqual({ status: 409, code: 'IMPORT_CONTENT_MISMATCH' });
    expect((await progress(importId)).body).toMatchObject({ status: 'completed', created: 2 });
    expect((await tasksOf(project)).some((t) => t.external_id === 'm9')).toBe(false);
  });

  it('refuses what it cannot read or may not do before reading the body', async () => {
    const path = `/projects/${project}/tasks/import?importId=${randomUUID()}`;
    expect(refusal(await svc.http(manager).post(path, [{ externalId: 'x' }]))).toEqual({ status: 415, code: 'IMPORT_UNSUPPORTED_MEDIA_TYPE' });
    expect(refusal(await svc.http(manager).post(`/projects/${project}/tasks/import`, line('x'), NDJSON))).toEqual({ status: 400, code: 'VALIDATION_FAILED', paths: ['query.importId'] });
    expect(refusal(await svc.http(manager).post(`/projects/${project}/tasks/import?importId=nope`, line('x'), NDJSON))).toEqual({ status: 400, code: 'VALIDATION_FAILED', paths: ['query.importId'] });
    expect(refusal(await svc.http(null).post(path, line('x'), NDJSON))).toEqual({ status: 401, code: 'TOKEN_MISSING' });
    expect(refusal(await svc.http(stranger).post(path, line('x'), NDJSON))).toEqual({ status: 404, code: 'PROJECT_NOT_FOUND' });
    expect(refusal(await svc.http(annotator).post(path, line('x'), NDJSON))).toEqual({ status: 403, code: 'FORBIDDEN' });
    expect(refusal(await svc.http(manager).post(path, line('x'), { ...NDJSON, 'content-encoding': 'gzip' }))).toEqual({ status: 415, code: 'IMPORT_UNSUPPORTED_MEDIA_TYPE' });
    expect(refusal(await svc.http(manager).post(path, line('x'), { 'content-type': 'application/x-ndjson; charset=utf-16le' }))).toEqual({ status: 415, code: 'IMPORT_UNSUPPORTED_MEDIA_TYPE' });
    expect((await svc.http(manager).post(path, line('x0'), { 'content-type': 'application/x-ndjson; charset=UTF-8' })).status).toBe(200);
    expect((await tasksOf(project)).some((t) => t.external_id === 'x')).toBe(false);
  });

  it('reports a line whose error would quote NUL or half an emoji like any bad line, and imports the rest', async () => {
    const projectId = randomUUID();
    const lines = [line('u1'), 'abc\u0000def', `{"externalId":"${'🐱'.repeat(200)}`, '{"externalId":"e","title":"t","dataUri":"s3://b/d","x\\u0000y":1}', line('u2')];
    const answer = await upload(randomUUID(), file(lines), as.manager('mgr-1', projectId), projectId);
    expect(answer.status, JSON.stringify(answer.body)).toBe(200);
    expect(answer.body).toMatchObject({ status: 'completed', lines: 5, created: 2, rejected: 3 });
    expect(answer.body.errors.map((e) => [e.line, e.code])).toEqual([
      [2, 'INVALID_JSON'],
      [3, 'INVALID_JSON'],
      [4, 'VALIDATION_FAILED'],
    ]);
  });

  it('shows an import only to callers of its project, as 404 to everyone else as if it did not exist', async () => {
    const importId = randomUUID();
    await upload(importId, file([line('v1')]));
    expect((await progress(importId)).body).toMatchObject({ importId, status: 'completed', lines: 1, created: 1 });
    expect(refusal(await progress(importId, stranger))).toEqual({ status: 404, code: 'IMPORT_NOT_FOUND' });
    expect(refusal(await progress(importId, stranger, elsewhere))).toEqual({ status: 404, code: 'IMPORT_NOT_FOUND' });
    expect(refusal(await progress(randomUUID()))).toEqual({ status: 404, code: 'IMPORT_NOT_FOUND' });
  });

  it('refuses a second upload of an import while the first runs, and lets the first finish', async () => {
    const importId = randomUUID();
    const first = streamingUpload(baseUrl, `/projects/${project}/tasks/import?importId=${importId}`, manager);
    await first.start();
    await first.write(`${line('c1')}\n`);
    await eventually(async () => expect((await progress(importId)).body.status).toBe('running'));
    expect(refusal(await upload(importId, file([line('c1')])))).toEqual({ status: 409, code: 'IMPORT_IN_PROGRESS' });
    await first.write(`${line('c2')}\n`);
    first.end();
    expect(await first.answer).toMatchObject({ status: 200, body: { status: 'completed', lines: 2, created: 2 } });
  });

  it('keeps the batches committed before the connection dropped, and a re-upload finishes the job with the counts of one upload', async () => {
    const projectId = randomUUID();
    const owner = as.owner('own-1', projectId);
    const importId = randomUUID();
    const lines = Array.from({ length: 40 }, (_, i) => line(`k${i % 30}`));
    const cut = streamingUpload(baseUrl, `/projects/${projectId}/tasks/import?importId=${importId}`, owner);
    await cut.start();
    await cut.write(file(lines.slice(0, 17)));
    await eventually(async () => expect((await progress(importId, owner, projectId)).body.created).toBeGreaterThanOrEqual(15));
    cut.cutOff();
    await cut.answer.catch(() => undefined);
    const interrupted = await eventually(async () => {
      const seen = await progress(importId, owner, projectId);
      expect(seen.body.status).toBe('interrupted');
      return seen.body;
    });
    expect(interrupted).toMatchObject({ lines: 15, created: 15 });
    expect(await tasksOf(projectId)).toHaveLength(15);

    const resumed = await upload(importId, file(lines), owner, projectId);
    expect(resumed.status, JSON.stringify(resumed.body)).toBe(200);
    expect(resumed.body).toMatchObject({ status: 'completed', lines: 40, created: 30, alreadyPresent: 10, rejected: 0, uploads: 2 });
    const tasks = await tasksOf(projectId);
    expect(tasks).toHaveLength(30);
    expect(await createdEventsOf(projectId)).toHaveLength(30);
  });

  it('reads a completed job that a grown file began to extend as interrupted until the file is imported to its end, however often its uploads drop', async () => {
    const projectId = randomUUID();
    const owner = as.owner('own-1', projectId);
    const importId = randomUUID();
    const lines = Array.from({ length: 30 }, (_, i) => line(`g${i}`));
    const path = `/projects/${projectId}/tasks/import?importId=${importId}`;
    expect((await upload(importId, file(lines.slice(0, 10)), owner, projectId)).body).toMatchObject({ status: 'completed', lines: 10 });

    // The grown file: a batch past the old end commits, then the connection drops.
    const grown = streamingUpload(baseUrl, path, owner);
    await grown.start();
    await grown.write(file(lines.slice(0, 17)));
    await eventually(async () => expect((await progress(importId, owner, projectId)).body.lines).toBeGreaterThanOrEqual(15));
    grown.cutOff();
    await grown.answer.catch(() => undefined);
    await eventually(async () => expect((await progress(importId, owner, projectId)).body).toMatchObject({ status: 'interrupted', completedAt: null }));

    // An upload that drops before reaching that point leaves it interrupted: lines 16-30 were never imported.
    const short = streamingUpload(baseUrl, path, owner);
    await short.start();
    await short.write(file(lines.slice(0, 12)));
    await eventually(async () => expect((await queryRows<{ uploads: number }>(svc.databaseUrl, 'SELECT uploads FROM imports WHERE import_id = $1', [importId]))[0]?.uploads).toBe(3));
    short.cutOff();
    await short.answer.catch(() => undefined);
    await eventually(async () => expect((await progress(importId, owner, projectId)).body).toMatchObject({ status: 'interrupted', lines: 15 }));

    const finished = await upload(importId, file(lines), owner, projectId);
    expect(finished.body).toMatchObject({ status: 'completed', lines: 30, created: 30 });
    expect(finished.body.completedAt).not.toBeNull();
  });

  it('answers 503 when the database keeps failing a batch, and a later upload finishes the job', async () => {
    const importId = randomUUID();
    locker = new pg.Client({ connectionString: svc.databaseUrl });
    await locker.connect();
    await locker.query('BEGIN');
    // Blocks every insert into tasks: each try of the batch hits the lock timeout, a transient error.
    await locker.query('LOCK TABLE tasks IN SHARE MODE');
    const body = file([line('u1'), line('u2')]);
    const failed = await svc.http(manager, { serverErrors: 'return' }).post<Summary>(`/projects/${project}/tasks/import?importId=${importId}`, body, NDJSON);
    expect(refusal(failed)).toEqual({ status: 503, code: 'IMPORT_STORE_UNAVAILABLE' });
    expect(failed.headers.get('retry-after')).toBe('1');
    // The driver's text (here "canceling statement due to lock timeout") stays in the log.
    expect(JSON.stringify(failed.body)).not.toMatch(/canceling|lock timeout/);
    expect((await progress(importId)).body).toMatchObject({ status: 'interrupted', created: 0 });
    await locker.query('ROLLBACK');
    expect((await upload(importId, body)).body).toMatchObject({ status: 'completed', created: 2, uploads: 2 });
  });
});

describe('task-svc bulk import, a client gone silent and a full instance', () => {
  const start = async (env: Record<string, string>) => {
    const svc = await buildTestService(infra, 'task-svc', (e) => buildService(taskService, loadConfig(TaskSvcConfig, e)), env);
    await svc.built.app.listen({ port: 0, host: '127.0.0.1' });
    return { svc, baseUrl: `http://127.0.0.1:${(svc.built.app.server.address() as AddressInfo).port}` };
  };
  const services: InProcessService<BuiltService<TaskSvcConfig>>[] = [];
  afterAll(async () => {
    for (const svc of services) await svc.close();
  });

  it('ends an upload whose client sends nothing past IMPORT_IDLE_MS as interrupted, so the same importId resumes at once', async () => {
    const { svc, baseUrl } = await start({ IMPORT_BATCH_SIZE: '5', IMPORT_IDLE_MS: '1000' });
    services.push(svc);
    const projectId = randomUUID();
    const owner = as.owner('own-1', projectId);
    const importId = randomUUID();
    const lines = Array.from({ length: 12 }, (_, i) => line(`s${i}`));
    const silent = streamingUpload(baseUrl, `/projects/${projectId}/tasks/import?importId=${importId}`, owner);
    await silent.start();
    await silent.write(file(lines.slice(0, 6)));
    // The client neither sends more nor hangs up: the upload ends on its own and frees the job.
    await expect(silent.answer).rejects.toThrow();
    // The socket closes first; the job is released right after, in its own statement.
    await eventually(async () => expect((await svc.http(owner).get<Summary>(`/projects/${projectId}/imports/${importId}`)).body).toMatchObject({ status: 'interrupted', created: 5 }));

    const resumed = await svc.http(owner).post<Summary>(`/projects/${projectId}/tasks/import?importId=${importId}`, file(lines), NDJSON);
    expect(resumed.status, JSON.stringify(resumed.body)).toBe(200);
    expect(resumed.body).toMatchObject({ status: 'completed', lines: 12, created: 12, uploads: 2 });
  });

  it('answers 429 IMPORT_BUSY with Retry-After beyond IMPORT_MAX_CONCURRENT uploads, and takes the upload once one ended', async () => {
    const { svc, baseUrl } = await start({ IMPORT_MAX_CONCURRENT: '1' });
    services.push(svc);
    const projectId = randomUUID();
    const owner = as.owner('own-1', projectId);
    const first = streamingUpload(baseUrl, `/projects/${projectId}/tasks/import?importId=${randomUUID()}`, owner);
    await first.start();
    await first.write(`${line('b1')}\n`);
    // The first upload holds the only slot until it ends: its job is running.
    await eventually(async () => expect((await queryRows<{ n: string }>(svc.databaseUrl, "SELECT count(*) AS n FROM imports WHERE project_id = $1 AND status = 'running'", [projectId]))[0]?.n).toBe('1'));
    const second = () => svc.http(owner, { serverErrors: 'return' }).post<Summary>(`/projects/${projectId}/tasks/import?importId=${randomUUID()}`, file([line('b2')]), NDJSON);
    const busy = await second();
    expect(refusal(busy)).toEqual({ status: 429, code: 'IMPORT_BUSY' });
    expect(busy.headers.get('retry-after')).toBe('5');
    first.end();
    expect(await first.answer).toMatchObject({ status: 200, body: { status: 'completed', created: 1 } });
    expect((await second()).status).toBe(200);
  });

  it('leaves the slots beyond IMPORT_MAX_PER_PROJECT to other projects: a project whose uploads trickle in cannot hold them all', async () => {
    const { svc, baseUrl } = await start({ IMPORT_MAX_CONCURRENT: '2', IMPORT_MAX_PER_PROJECT: '1' });
    services.push(svc);
    const [mine, theirs] = [randomUUID(), randomUUID()];
    const owner = as.owner('own-1', mine);
    const first = streamingUpload(baseUrl, `/projects/${mine}/tasks/import?importId=${randomUUID()}`, owner);
    await first.start();
    await first.write(`${line('p1')}\n`);
    await eventually(async () => expect((await queryRows<{ n: string }>(svc.databaseUrl, "SELECT count(*) AS n FROM imports WHERE project_id = $1 AND status = 'running'", [mine]))[0]?.n).toBe('1'));
    const again = await svc.http(owner, { serverErrors: 'return' }).post<Summary>(`/projects/${mine}/tasks/import?importId=${randomUUID()}`, file([line('p2')]), NDJSON);
    expect(refusal(again)).toEqual({ status: 429, code: 'IMPORT_BUSY' });
    expect(again.headers.get('retry-after')).toBe('5');
    // Another tenant's upload still finds a slot on this instance.
    const other = await svc.http(as.owner('own-2', theirs)).post<Summary>(`/projects/${theirs}/tasks/import?importId=${randomUUID()}`, file([line('q1')]), NDJSON);
    expect(other.status, JSON.stringify(other.body)).toBe(200);
    first.end();
    expect(await first.answer).toMatchObject({ status: 200, body: { status: 'completed', created: 1 } });
  });
  it('bounds one caller\'s uploads by IMPORT_MAX_PER_PROJECT across projects too, so a manager of several projects cannot take every slot', async () => {
    const { svc, baseUrl } = await start({ IMPORT_MAX_CONCURRENT: '3', IMPORT_MAX_PER_PROJECT: '1' });
    services.push(svc);
    const [p1, p2, p3] = [randomUUID(), randomUUID(), randomUUID()];
    const manager: TestIdentity = { user: 'mgr-many', projects: { [p1]: 'manager', [p2]: 'manager' } };
    const first = streamingUpload(baseUrl, `/projects/${p1}/tasks/import?importId=${randomUUID()}`, manager);
    await first.start();
    await first.write(`${line('m1')}\n`);
    await eventually(async () => expect((await queryRows<{ n: string }>(svc.databaseUrl, "SELECT count(*) AS n FROM imports WHERE project_id = $1 AND status = 'running'", [p1]))[0]?.n).toBe('1'));
    // Another of the caller's projects, with a slot free: still refused, the caller holds one already.
    const second = await svc.http(manager, { serverErrors: 'return' }).post<{ error: { message: string } }>(`/projects/${p2}/tasks/import?importId=${randomUUID()}`, file([line('m2')]), NDJSON);
    expect(refusal(second)).toEqual({ status: 429, code: 'IMPORT_BUSY' });
    expect(second.body.error.message).toMatch(/^you have 1 imports running on this instance already/);
    // Someone else finds the free slot.
    const other = await svc.http(as.owner('own-3', p3)).post<Summary>(`/projects/${p3}/tasks/import?importId=${randomUUID()}`, file([line('o1')]), NDJSON);
    expect(other.status, JSON.stringify(other.body)).toBe(200);
    first.end();
    expect(await first.answer).toMatchObject({ status: 200, body: { status: 'completed', created: 1 } });
    // Once the first upload ended, the caller's next one runs.
    expect((await svc.http(manager).post<Summary>(`/projects/${p2}/tasks/import?importId=${randomUUID()}`, file([line('m3')]), NDJSON)).status).toBe(200);
  });
});

describe('task-svc bulk import, a shutdown during an upload', () => {
  it('ends the upload under way instead of waiting for it, leaving the job interrupted and resumable with its batches kept', async () => {
    const svc = await buildTestService(infra, 'task-svc', (env) => buildService(taskService, loadConfig(TaskSvcConfig, env)), { IMPORT_BATCH_SIZE: '5' });
    let closed = false;
    try {
      await svc.built.app.listen({ port: 0, host: '127.0.0.1' });
      const baseUrl = `http://127.0.0.1:${(svc.built.app.server.address() as AddressInfo).port}`;
      const projectId = randomUUID();
      const owner = as.owner('own-1', projectId);
      const importId = randomUUID();
      const upload = streamingUpload(baseUrl, `/projects/${projectId}/tasks/import?importId=${importId}`, owner);
      await upload.start();
      // Ten lines: two batches committed; the client then keeps its upload open, sending nothing.
      await upload.write(file(Array.from({ length: 10 }, (_, i) => line(`s${i}`))));
      const job = async () => (await queryRows<{ status: string; created: string; owner: string | null }>(svc.databaseUrl, 'SELECT status, created, owner FROM imports WHERE import_id = $1', [importId]))[0];
      await eventually(async () => expect(await job()).toMatchObject({ created: '10' }));
      // Before, the close waited for the upload to end, which this client never does. The answer
      // (a hang-up) may come while the close still runs: it is awaited from the start.
      const answered = upload.answer.catch(() => undefined);
      await svc.built.app.close();
      await answered;
      expect(await job()).toMatchObject({ status: 'interrupted', created: '10', owner: null });
      await svc.close();
      closed = true;
    } finally {
      if (!closed) await svc.close();
    }
  });

  it('lets the batch in flight finish and the job go before the pool closes, so a resume is not refused while a lease lapses', async () => {
    // The longest wait the close allows (4 s): the test's steps after the close began take a fifth
    // of a second and some milliseconds.
    const svc = await buildTestService(infra, 'task-svc', (env) => buildService(taskService, loadConfig(TaskSvcConfig, env)), { IMPORT_BATCH_SIZE: '5', IMPORT_CLOSE_WAIT_MS: '4000' });
    const blocker = new pg.Client({ connectionString: svc.databaseUrl });
    blocker.on('error', () => undefined);
    let closed = false;
    try {
      await svc.built.app.listen({ port: 0, host: '127.0.0.1' });
      const baseUrl = `http://127.0.0.1:${(svc.built.app.server.address() as AddressInfo).port}`;
      const projectId = randomUUID();
      const importId = randomUUID();
      // Another transaction holds external id h3 of the project, uncommitted: the batch that
      // carries it waits on that row's lock.
      await blocker.connect();
      await blocker.query('BEGIN');
      await blocker.query(
        `INSERT INTO tasks (task_id, project_id, title, data_uri, task_number, external_id, status, attempt, version)
         VALUES ($1, $2, 'held', 's3://bucket/held.jpg', 'HELD-1', 'h3', 'open', 1, 1)`,
        [String(freshSnowflake()), projectId],
      );
      const upload = streamingUpload(baseUrl, `/projects/${projectId}/tasks/import?importId=${importId}`, as.owner('own-1', projectId));
      await upload.start();
      await upload.write(file(Array.from({ length: 5 }, (_, i) => line(`h${i}`))));
      const job = async () => (await queryRows<{ status: string; owner: string | null }>(svc.databaseUrl, 'SELECT status, owner FROM imports WHERE import_id = $1', [importId]))[0];
      const waiting = async () =>
        (await queryRows<{ n: number }>(svc.databaseUrl, `SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`))[0]?.n;
      await eventually(async () => expect(await waiting()).toBe(1));
      // The whole service's close, as on SIGTERM: the HTTP server, then the rest, the pool last.
      const closing = svc.built.lifecycle.close();
      await upload.answer.catch(() => undefined);
      // The upload is ended; its batch still waits. A close that does not wait for it reaches the
      // pool's end within milliseconds (nothing else here takes long to close): a fifth of a second
      // shows whether it got there, and leaves 3.8 of the close's 4 s to the ROLLBACK and the batch
      // on a loaded machine. Only then is the batch let through; its release must still come
      // before the pool ends (a wait for something not to happen: there is no event to wait on).
      await new Promise((resolve) => setTimeout(resolve, 200));
      expect((svc.built.ctx.pool as pg.Pool & { ending: boolean }).ending).toBe(false);
      await blocker.query('ROLLBACK');
      await closing;
      expect(await job()).toEqual({ status: 'interrupted', owner: null });
      await blocker.end();
      await svc.close();
      closed = true;
    } finally {
      await blocker.end().catch(() => undefined);
      if (!closed) await svc.close();
    }
  });
});
