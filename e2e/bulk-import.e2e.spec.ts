import { randomUUID } from 'node:crypto';
import http from 'node:http';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { as, eventually, metricValue, queryRows, readAll, startStack, tokenFor, type TestIdentity, type TestStack } from '@labelflow/testing';
import { expectAuditClean } from './audit';

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
}

/**
 * A 20,000-line import file: every 20th line is bad (not JSON or a missing field in turn, and every
 * 2,000th longer than the 64 KiB cap), every 5th of the others repeats an earlier external id with another title,
 * and the rest are new. Returns the text and what an import of it must come to.
 */
function importFile(size: number, tag: string) {
  const lines: string[] = [];
  const distinct: string[] = [];
  const bad: { line: number; code: string }[] = [];
  let repeats = 0;
  for (let n = 1; n <= size; n += 1) {
    if (n % 20 === 0) {
      const kind = n % 2_000 === 0 ? 'LINE_TOO_LONG' : (n / 20) % 2 === 0 ? 'INVALID_JSON' : 'VALIDATION_FAILED';
      if (kind === 'INVALID_JSON') lines.push(`{"externalId":"${tag}-bad-${n}",`);
      else if (kind === 'VALIDATION_FAILED') lines.push(JSON.stringify({ externalId: `${tag}-bad-${n}`, title: 'no data' }));
      else lines.push(JSON.stringify({ externalId: `${tag}-bad-${n}`, title: 'x'.repeat(70_000), dataUri: 's3://b/x' }));
      bad.push({ line: n, code: kind });
    } else if (n % 5 === 0 && distinct.length > 0) {
      const earlier = distinct[(n * 7919) % distinct.length]!;
      lines.push(JSON.stringify({ externalId: earlier, title: `repeat at line ${n}`, dataUri: `s3://bucket/${earlier}.jpg` }));
      repeats += 1;
    } else {
      const id = `${tag}-${n}`;
      distinct.push(id);
      lines.push(JSON.stringify({ externalId: id, title: `item ${n}`, dataUri: `s3://bucket/${id}.jpg` }));
    }
  }
  return { lines, text: `${lines.join('\n')}\n`, distinct, repeats, bad };
}

describe('bulk import through the running services', () => {
  let stack: TestStack;
  const infra = inject('infra');
  const size = 20_000;

  beforeAll(async () => {
    stack = await startStack(infra);
  });
  afterAll(async () => stack?.stop());

  const upload = async (projectId: string, importId: string, body: string, by: TestIdentity) => {
    const response = await fetch(`${stack.processes['task-svc'].url}/projects/${projectId}/tasks/import?importId=${importId}`, {
      method: 'POST',
      headers: { authorization: `Bearer ${await tokenFor(by)}`, 'content-type': 'application/x-ndjson' },
      body,
    });
    return { status: response.status, body: (await response.json()) as Summary };
  };
  const progress = async (projectId: string, importId: string, by: TestIdentity) => (await stack.http('task-svc', by).get<Summary>(`/projects/${projectId}/imports/${importId}`)).body;

  const consumers = ['label-svc', 'billing-svc'] as const;
  /** TaskCreated each consumer of task-events has seen so far (it reads and skips them): taken before a test's imports. */
  const createdSeen = async (): Promise<Record<(typeof consumers)[number], number>> => {
    const [label = 0, billing = 0] = await Promise.all(consumers.map(async (name) => metricValue(await stack.metrics(name), 'consumer_skipped_total', { type: 'TaskCreated' })));
    return { 'label-svc': label, 'billing-svc': billing };
  };

  /**
   * Each distinct valid line is one task, with one TaskCreated on Kafka, seen once by each service
   * consuming the topic: `created` more than `before`, what they had seen when the test began.
   */
  const expectExactlyTheDistinctTasks = async (projectId: string, distinct: readonly string[], before: Awaited<ReturnType<typeof createdSeen>>, created: number) => {
    const tasks = await queryRows<{ task_id: string; external_id: string }>(stack.databases['task-svc'], 'SELECT task_id, external_id FROM tasks WHERE project_id = $1', [projectId]);
    expect(tasks).toHaveLength(distinct.length);
    expect(new Set(tasks.map((t) => t.external_id))).toEqual(new Set(distinct));
    // Tens of thousands of events to relay and consume on a machine shared with other suites.
    await stack.quiesce(180_000);
    const published = (await readAll(infra.kafkaBrokers, `${stack.prefix}.task-events`))
      .filter((m) => m.headers?.['event-type']?.toString() === 'TaskCreated')
      .map((m) => JSON.parse(m.value!.toString()) as { taskId: string; projectId: string; payload: { externalId?: string } })
      .filter((e) => e.projectId === projectId);
    expect(published).toHaveLength(distinct.length);
    expect(new Set(published.map((e) => e.taskId))).toEqual(new Set(tasks.map((t) => t.task_id)));
    for (const name of consumers) {
      expect(metricValue(await stack.metrics(name), 'consumer_skipped_total', { type: 'TaskCreated' }) - before[name], `${name} saw each TaskCreated once`).toBe(created);
    }
    await expectAuditClean(stack, infra.kafkaBrokers);
  };

  const projectId = randomUUID();
  const manager = as.manager('importer', projectId);
  const file = importFile(size, 'main');

  it('imports a 20,000-line file with repeated and bad lines as exactly the distinct valid tasks, once each, reports each bad line by number, and creates nothing when the file is uploaded again under a new importId', async () => {
    const before = await createdSeen();
    const answer = await upload(projectId, randomUUID(), file.text, manager);
    expect(answer.status, JSON.stringify(answer.body).slice(0, 500)).toBe(200);
    expect(answer.body).toMatchObject({ status: 'completed', lines: size, created: file.distinct.length, alreadyPresent: file.repeats, rejected: file.bad.length, errorsTruncated: false });
    expect(answer.body.errors.map((e) => ({ line: e.line, code: e.code }))).toEqual(file.bad);
    await expectExactlyTheDistinctTasks(projectId, file.distinct, before, file.distinct.length);

    const again = await upload(projectId, randomUUID(), file.text, manager);
    expect(again.body).toMatchObject({ status: 'completed', lines: size, created: 0, alreadyPresent: file.distinct.length + file.repeats, rejected: file.bad.length });
    await expectExactlyTheDistinctTasks(projectId, file.distinct, before, file.distinct.length);
  });

  it('finishes an upload cut off half way when the same file is uploaded again, with the counts of one uninterrupted upload', async () => {
    const cutProject = randomUUID();
    const owner = as.owner('importer', cutProject);
    const importId = randomUUID();
    const cutFile = importFile(size, 'cut');
    const before = await createdSeen();
    const request = http.request(`${stack.processes['task-svc'].url}/projects/${cutProject}/tasks/import?importId=${importId}`, {
      method: 'POST',
      headers: { authorization: `Bearer ${await tokenFor(owner)}`, 'content-type': 'application/x-ndjson', 'transfer-encoding': 'chunked' },
    });
    request.on('error', () => undefined);
    // Sends the first slices of the file, waits until some batches committed, and drops the connection.
    const sent = 3_000;
    await new Promise<void>((resolve, reject) => request.write(`${cutFile.lines.slice(0, sent).join('\n')}\n`, (error) => (error ? reject(error) : resolve())));
    await eventually(async () => expect((await progress(cutProject, importId, owner)).created).toBeGreaterThan(0));
    request.destroy();
    const interrupted = await eventually(async () => {
      const seen = await progress(cutProject, importId, owner);
      expect(seen.status).toBe('interrupted');
      return seen;
    });
    expect(interrupted.created).toBeGreaterThan(0);
    expect(interrupted.created).toBeLessThan(cutFile.distinct.length);

    const resumed = await upload(cutProject, importId, cutFile.text, owner);
    expect(resumed.status, JSON.stringify(resumed.body).slice(0, 500)).toBe(200);
    expect(resumed.body).toMatchObject({ status: 'completed', lines: size, created: cutFile.distinct.length, alreadyPresent: cutFile.repeats, rejected: cutFile.bad.length, uploads: 2 });
    expect(resumed.body.errors.map((e) => ({ line: e.line, code: e.code }))).toEqual(cutFile.bad);
    await expectExactlyTheDistinctTasks(cutProject, cutFile.distinct, before, cutFile.distinct.length);
  });
});
