import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, inject, it, vi } from 'vitest';
import { buildService, listen, loadConfig, type BuiltService } from '@labelflow/service-kit';
import { as, buildTestService, freshSnowflake, refusal, type InProcessService, type TestIdentity } from '@labelflow/testing';
import { TaskSvcConfig } from '../config';
import { taskService } from '../service';

const infra = inject('infra');

interface TaskView {
  readonly taskId: string;
  readonly projectId: string;
  readonly title: string;
  readonly taskNumber: string | null;
  readonly status: string;
  readonly attempt: number;
  readonly assignee?: string | null;
  readonly leaseExpiresAt: string | null;
  readonly reason: string | null;
}

const project = randomUUID();
const elsewhere = randomUUID();
const manager = as.manager('mgr-1', project);
const owner = as.owner('own-1', project);
const reviewer = as.reviewer('rev-1', project);
const annotator = as.annotator('ann-1', project);
const otherAnnotator = as.annotator('ann-2', project);
const stranger = as.manager('mgr-elsewhere', elsewhere);

describe('task-svc routes, answered in-process', () => {
  let svc: InProcessService<BuiltService<TaskSvcConfig>>;

  beforeAll(async () => {
    svc = await buildTestService(infra, 'task-svc', (env) => buildService(taskService, loadConfig(TaskSvcConfig, env)));
  });
  afterAll(async () => {
    await svc?.close();
  });

  const createTask = async (by: TestIdentity = manager, projectId = project, extra: Record<string, unknown> = {}) => {
    const created = await svc.http(by).post<TaskView>('/tasks', { projectId, title: 'cat?', dataUri: 's3://bucket/1.jpg', ...extra }, { 'idempotency-key': randomUUID() });
    expect(created.status).toBe(201);
    return created.body;
  };

  describe('POST /tasks', () => {
    it('creates an open, numbered task for a manager and replays it for the same key', async () => {
      const key = randomUUID();
      const body = { projectId: project, title: 'is it a cat?', dataUri: 's3://bucket/cat.jpg' };
      const created = await svc.http(manager).post<TaskView>('/tasks', body, { 'idempotency-key': key });
      expect(created.status).toBe(201);
      expect(created.body).toMatchObject({ projectId: project, title: 'is it a cat?', status: 'open', attempt: 1, assignee: null, taskNumber: expect.stringMatching(/^TASK-[1-9][0-9]*$/) });
      const replayed = await svc.http(manager).post<TaskView>('/tasks', body, { 'idempotency-key': key });
      expect(replayed.status).toBe(201);
      expect(replayed.headers.get('idempotent-replayed')).toBe('true');
      expect(replayed.body.taskId).toBe(created.body.taskId);
    });

    it('lets owners and platform admins create tasks too', async () => {
      expect((await createTask(owner)).status).toBe('open');
      expect((await createTask(as.admin())).status).toBe('open');
    });

    it('answers 401 TOKEN_MISSING with a bearer challenge to a request without a token', async () => {
      const answer = await svc.http(null).post('/tasks', { projectId: project, title: 't', dataUri: 's3://b/d' }, { 'idempotency-key': randomUUID() });
      expect(refusal(answer)).toEqual({ status: 401, code: 'TOKEN_MISSING' });
      expect(answer.headers.get('www-authenticate')).toBe('Bearer realm="labelflow"');
    });

    it('answers 400 VALIDATION_FAILED naming each field that failed its schema', async () => {
      const answer = await svc.http(manager).post('/tasks', { projectId: 'not-a-uuid', title: '   ', dataUri: 's3://b/1' }, { 'idempotency-key': randomUUID() });
      expect(refusal(answer)).toEqual({ status: 400, code: 'VALIDATION_FAILED', paths: ['body.projectId', 'body.title'] });
      const extra = await svc.http(manager).post('/tasks', { projectId: project, title: 't', dataUri: 's3://b/d', priority: 1 }, { 'idempotency-key': randomUUID() });
      expect(refusal(extra)).toEqual({ status: 400, code: 'VALIDATION_FAILED', paths: ['body'] });
      // An annotation tool would put it in a link or an image source.
      for (const dataUri of ['javascript:alert(1)', 'data:text/html,<script>x</script>', 'cats/1.jpg']) {
        const answer = await svc.http(manager).post('/tasks', { projectId: project, title: 't', dataUri }, { 'idempotency-key': randomUUID() });
        expect(refusal(answer), dataUri).toEqual({ status: 400, code: 'VALIDATION_FAILED', paths: ['body.dataUri'] });
      }
    });

    it('answers 404 PROJECT_NOT_FOUND to a caller with no role in the project', async () => {
      const answer = await svc.http(stranger).post('/tasks', { projectId: project, title: 't', dataUri: 's3://b/d' }, { 'idempotency-key': randomUUID() });
      expect(refusal(answer)).toEqual({ status: 404, code: 'PROJECT_NOT_FOUND' });
    });

    it('answers 403 FORBIDDEN to reviewers and annotators of the project, before looking at the key', async () => {
      for (const who of [reviewer, annotator]) {
        expect(refusal(await svc.http(who).post('/tasks', { projectId: project, title: 't', dataUri: 's3://b/d' }))).toEqual({ status: 403, code: 'FORBIDDEN' });
      }
    });

    it('answers 400 IDEMPOTENCY_KEY_REQUIRED to an authorized request without a key', async () => {
      expect(refusal(await svc.http(manager).post('/tasks', { projectId: project, title: 't', dataUri: 's3://b/d' }))).toEqual({ status: 400, code: 'IDEMPOTENCY_KEY_REQUIRED' });
    });

    it('costs the project no task number for a request refused for its Idempotency-Key', async () => {
      const fresh = randomUUID();
      const admin = as.admin();
      const refused = await svc.http(admin).post('/tasks', { projectId: fresh, title: 't', dataUri: 's3://b/d', projectKey: 'GAMMA' }, { 'idempotency-key': 'k'.repeat(300) });
      expect(refusal(refused)).toMatchObject({ status: 400, code: 'IDEMPOTENCY_KEY_INVALID' });
      expect((await createTask(admin, fresh, { projectKey: 'GAMMA' })).taskNumber).toBe('GAMMA-1');
    });

    it('answers 409 PROJECT_KEY_MISMATCH when a task names another key than the project numbers its tasks with', async () => {
      const keyed = randomUUID();
      const admin = as.admin();
      expect((await createTask(admin, keyed, { projectKey: 'ALPHA' })).taskNumber).toBe('ALPHA-1');
      const answer = await svc.http(admin).post('/tasks', { projectId: keyed, title: 't', dataUri: 's3://b/d', projectKey: 'BETA' }, { 'idempotency-key': randomUUID() });
      expect(refusal(answer)).toEqual({ status: 409, code: 'PROJECT_KEY_MISMATCH' });
    });
  });

  describe('POST /tasks/:taskId/claim', () => {
    it('assigns an open task to the annotator who claims it, and answers a repeated claim the same', async () => {
      const task = await createTask();
      const claimed = await svc.http(annotator).post<TaskView>(`/tasks/${task.taskId}/claim`, {});
      expect(claimed.status).toBe(200);
      expect(claimed.body).toMatchObject({ taskId: task.taskId, status: 'assigned', assignee: 'ann-1', attempt: 1, leaseExpiresAt: expect.any(String) });
      const again = await svc.http(annotator).post<TaskView>(`/tasks/${task.taskId}/claim`, { annotatorId: 'ann-1' });
      expect(again.status).toBe(200);
      expect(again.body.assignee).toBe('ann-1');
    });

    it('answers 409 TASK_NOT_CLAIMABLE to a second annotator, without naming the holder to her', async () => {
      const task = await createTask();
      await svc.http(annotator).post(`/tasks/${task.taskId}/claim`);
      const answer = await svc.http(otherAnnotator).post<{ error: { details?: unknown } }>(`/tasks/${task.taskId}/claim`, {});
      expect(refusal(answer)).toEqual({ status: 409, code: 'TASK_NOT_CLAIMABLE' });
      expect(answer.body.error.details).toBeUndefined();
    });

    it('replays a claim retried with the same key whether it sent no body, {} or its own annotator id', async () => {
      const task = await createTask();
      const key = { 'idempotency-key': randomUUID() };
      expect((await svc.http(annotator).post(`/tasks/${task.taskId}/claim`, undefined, key)).status).toBe(200);
      for (const body of [{}, { annotatorId: annotator.user }]) {
        const retried = await svc.http(annotator).post(`/tasks/${task.taskId}/claim`, body, key);
        expect(retried.status, JSON.stringify(body)).toBe(200);
        expect(retried.headers.get('idempotent-replayed')).toBe('true');
      }
    });

    it('answers 400 VALIDATION_FAILED for a malformed task id or annotator id', async () => {
      expect(refusal(await svc.http(annotator).post('/tasks/abc/claim', {}))).toEqual({ status: 400, code: 'VALIDATION_FAILED', paths: ['path.taskId'] });
      const task = await createTask();
      expect(refusal(await svc.http(annotator).post(`/tasks/${task.taskId}/claim`, { annotatorId: 'not valid!' }))).toEqual({ status: 400, code: 'VALIDATION_FAILED', paths: ['body.annotatorId'] });
    });

    it('answers 401 without a token', async () => {
      expect(refusal(await svc.http(null).post(`/tasks/${freshSnowflake()}/claim`, {}))).toEqual({ status: 401, code: 'TOKEN_MISSING' });
    });

    it('answers 404 TASK_NOT_FOUND for a task that does not exist and for one in a project the caller has no part in', async () => {
      expect(refusal(await svc.http(annotator).post(`/tasks/${freshSnowflake()}/claim`, {}))).toEqual({ status: 404, code: 'TASK_NOT_FOUND' });
      const task = await createTask();
      expect(refusal(await svc.http(as.annotator('ann-elsewhere', elsewhere)).post(`/tasks/${task.taskId}/claim`, {}))).toEqual({ status: 404, code: 'TASK_NOT_FOUND' });
    });

    it('answers 403 FORBIDDEN to managers and platform admins, who never claim', async () => {
      const task = await createTask();
      for (const who of [manager, as.admin()]) expect(refusal(await svc.http(who).post(`/tasks/${task.taskId}/claim`, {}))).toEqual({ status: 403, code: 'FORBIDDEN' });
    });

    it('answers 403 ACTOR_MISMATCH when the body names someone other than the caller', async () => {
      const task = await createTask();
      expect(refusal(await svc.http(annotator).post(`/tasks/${task.taskId}/claim`, { annotatorId: 'ann-2' }))).toEqual({ status: 403, code: 'ACTOR_MISMATCH' });
    });
  });

  describe('POST /tasks/:taskId/cancel', () => {
    it('cancels a task for a manager with the reason given, and answers a repeated cancel the same', async () => {
      const task = await createTask();
      const cancelled = await svc.http(manager).post<TaskView>(`/tasks/${task.taskId}/cancel`, { reason: 'duplicate item' });
      expect(cancelled.status).toBe(200);
      expect(cancelled.body).toMatchObject({ status: 'cancelled', reason: 'duplicate item' });
      expect((await svc.http(manager).post<TaskView>(`/tasks/${task.taskId}/cancel`, { reason: 'duplicate item' })).status).toBe(200);
    });

    it('answers 400 VALIDATION_FAILED for a malformed task id or a blank reason, before authorization', async () => {
      expect(refusal(await svc.http(manager).post('/tasks/0/cancel', { reason: 'r' }))).toEqual({ status: 400, code: 'VALIDATION_FAILED', paths: ['path.taskId'] });
      expect(refusal(await svc.http(stranger).post(`/tasks/${freshSnowflake()}/cancel`, { reason: '  ' }))).toEqual({ status: 400, code: 'VALIDATION_FAILED', paths: ['body.reason'] });
    });

    it('answers 401 without a token', async () => {
      expect(refusal(await svc.http(null).post(`/tasks/${freshSnowflake()}/cancel`, { reason: 'r' }))).toEqual({ status: 401, code: 'TOKEN_MISSING' });
    });

    it('answers 404 TASK_NOT_FOUND for an unknown task and across tenants', async () => {
      expect(refusal(await svc.http(manager).post(`/tasks/${freshSnowflake()}/cancel`, { reason: 'r' }))).toEqual({ status: 404, code: 'TASK_NOT_FOUND' });
      const task = await createTask();
      expect(refusal(await svc.http(stranger).post(`/tasks/${task.taskId}/cancel`, { reason: 'r' }))).toEqual({ status: 404, code: 'TASK_NOT_FOUND' });
    });

    it('answers 403 FORBIDDEN to reviewers and annotators of the project', async () => {
      const task = await createTask();
      for (const who of [reviewer, annotator]) expect(refusal(await svc.http(who).post(`/tasks/${task.taskId}/cancel`, { reason: 'r' }))).toEqual({ status: 403, code: 'FORBIDDEN' });
    });
  });

  describe('GET /tasks/:taskId', () => {
    it('shows the assignee to her and to managers, and leaves it out for a reviewer', async () => {
      const task = await createTask();
      await svc.http(annotator).post(`/tasks/${task.taskId}/claim`, {});
      expect((await svc.http(annotator).get<TaskView>(`/tasks/${task.taskId}`)).body.assignee).toBe('ann-1');
      expect((await svc.http(manager).get<TaskView>(`/tasks/${task.taskId}`)).body.assignee).toBe('ann-1');
      const seen = await svc.http(reviewer).get<TaskView>(`/tasks/${task.taskId}`);
      expect(seen.status).toBe(200);
      expect(seen.body.status).toBe('assigned');
      expect(seen.body).not.toHaveProperty('assignee');
    });

    it('with a wait condition and Prefer: wait, answers once the task meets it', async () => {
      const task = await createTask();
      const waiting = svc.http(manager).get<TaskView>(`/tasks/${task.taskId}?status=assigned`, { prefer: 'wait=20' });
      // The claim commits while the read waits: its signal, not a poll, brings the answer.
      await svc.http(annotator).post(`/tasks/${task.taskId}/claim`, {});
      const answer = await waiting;
      expect(answer.status).toBe(200);
      expect(answer.body.status).toBe('assigned');
      expect(answer.headers.get('preference-applied')).toBe('wait=20');
    });

    it('answers 400 VALIDATION_FAILED for a malformed id or wait condition', async () => {
      expect(refusal(await svc.http(manager).get('/tasks/12x'))).toEqual({ status: 400, code: 'VALIDATION_FAILED', paths: ['path.taskId'] });
      const task = await createTask();
      expect(refusal(await svc.http(manager).get(`/tasks/${task.taskId}?status=open,bogus`))).toEqual({ status: 400, code: 'VALIDATION_FAILED', paths: ['query.status.1'] });
      expect(refusal(await svc.http(manager).get(`/tasks/${task.taskId}?minAttempt=0`))).toEqual({ status: 400, code: 'VALIDATION_FAILED', paths: ['query.minAttempt'] });
    });

    it('answers 401 without a token', async () => {
      expect(refusal(await svc.http(null).get(`/tasks/${freshSnowflake()}`))).toEqual({ status: 401, code: 'TOKEN_MISSING' });
    });

    it('answers 404 TASK_NOT_FOUND for an unknown task and across tenants, at once even when asked to wait', async () => {
      expect(refusal(await svc.http(manager).get(`/tasks/${freshSnowflake()}?status=completed`, { prefer: 'wait=20' }))).toEqual({ status: 404, code: 'TASK_NOT_FOUND' });
      const task = await createTask();
      expect(refusal(await svc.http(stranger).get(`/tasks/${task.taskId}`))).toEqual({ status: 404, code: 'TASK_NOT_FOUND' });
    });
  });

  describe('GET /tasks', () => {
    const listed = randomUUID();
    const listedManager = as.manager('mgr-listed', listed);
    const created: TaskView[] = [];
    beforeAll(async () => {
      for (let i = 0; i < 3; i++) created.push(await createTask(listedManager, listed));
    });

    it('pages through the tasks of a project oldest first, ending with a null cursor', async () => {
      const first = await svc.http(listedManager).get<{ tasks: TaskView[]; nextCursor: string | null }>(`/tasks?projectId=${listed}&limit=2`);
      expect(first.status).toBe(200);
      expect(first.body.tasks.map((t) => t.taskId)).toEqual(created.slice(0, 2).map((t) => t.taskId));
      expect(first.body.nextCursor).toEqual(expect.any(String));
      const second = await svc.http(listedManager).get<{ tasks: TaskView[]; nextCursor: string | null }>(`/tasks?projectId=${listed}&limit=2&cursor=${first.body.nextCursor}`);
      expect(second.body.tasks.map((t) => t.taskId)).toEqual([created[2]!.taskId]);
      expect(second.body.nextCursor).toBeNull();
    });

    it('lists only the projects the caller has a role in, and nothing for a caller with none', async () => {
      const mine = await svc.http(listedManager).get<{ tasks: TaskView[] }>('/tasks?limit=1000');
      expect(new Set(mine.body.tasks.map((t) => t.projectId))).toEqual(new Set([listed]));
      const nobody = await svc.http({ user: 'nobody' }).get<{ tasks: TaskView[]; nextCursor: string | null }>('/tasks');
      expect(nobody.body).toEqual({ tasks: [], nextCursor: null });
    });

    it('filters by status', async () => {
      const open = await svc.http(listedManager).get<{ tasks: TaskView[] }>(`/tasks?projectId=${listed}&status=open`);
      expect(open.body.tasks).toHaveLength(3);
      expect((await svc.http(listedManager).get<{ tasks: TaskView[] }>(`/tasks?projectId=${listed}&status=assigned`)).body.tasks).toEqual([]);
    });

    it('answers 400 VALIDATION_FAILED for a bad filter or limit, and 400 CURSOR_INVALID for a cursor it did not issue', async () => {
      expect(refusal(await svc.http(listedManager).get('/tasks?status=bogus&limit=0'))).toEqual({ status: 400, code: 'VALIDATION_FAILED', paths: ['query.status', 'query.limit'] });
      expect(refusal(await svc.http(listedManager).get('/tasks?cursor=bm90LWpzb24'))).toEqual({ status: 400, code: 'CURSOR_INVALID' });
      // A misspelt filter is not silently no filter: every project's tasks would be listed.
      expect(refusal(await svc.http(listedManager).get(`/tasks?projectID=${listed}`))).toEqual({ status: 400, code: 'VALIDATION_FAILED', paths: ['query'] });
      expect(refusal(await svc.http(listedManager).get('/tasks?limit=0x10'))).toEqual({ status: 400, code: 'VALIDATION_FAILED', paths: ['query.limit'] });
    });

    it('answers 401 without a token', async () => {
      expect(refusal(await svc.http(null).get('/tasks'))).toEqual({ status: 401, code: 'TOKEN_MISSING' });
    });

    it('answers 404 PROJECT_NOT_FOUND for a project the caller has no role in', async () => {
      expect(refusal(await svc.http(stranger).get(`/tasks?projectId=${listed}`))).toEqual({ status: 404, code: 'PROJECT_NOT_FOUND' });
    });
  });

  describe('operational endpoints', () => {
    it('answers /healthz without a token', async () => {
      const answer = await svc.http(null).get('/healthz');
      expect(answer).toMatchObject({ status: 200, body: { status: 'ok' } });
    });

    it('serves /metrics to platform admins only', async () => {
      expect(refusal(await svc.http(null).get('/metrics'))).toEqual({ status: 401, code: 'TOKEN_MISSING' });
      expect(refusal(await svc.http(owner).get('/metrics'))).toEqual({ status: 403, code: 'FORBIDDEN' });
      const metrics = await svc.http(as.admin()).get<string>('/metrics');
      expect(metrics.status).toBe(200);
      expect(metrics.body).toContain('process_cpu_user_seconds_total{service="task-svc"}');
    });

    it('is not ready while built but not started, and ready once listening', async () => {
      const built = await svc.http(null, { serverErrors: 'return' }).get<{ status: string; checks: Record<string, string> }>('/readyz');
      expect(built.status).toBe(503);
      expect(built.body.checks).toEqual({ postgres: 'ok', redis: 'ok', kafka: 'ok', consumer: 'down: the consumer was not started' });

      const running = await listen(svc.built);
      const ready = await fetch(`${running.url}/readyz`);
      expect(ready.status).toBe(200);
      expect(await ready.json()).toEqual({ status: 'ready', checks: { postgres: 'ok', redis: 'ok', kafka: 'ok', consumer: 'ok' } });
      // Listening also watches the relay's lag: nothing waits in this outbox once it is published.
      await vi.waitFor(async () => expect((await svc.http(as.admin()).get<string>('/metrics')).body).toMatch(/^outbox_oldest_pending_seconds\{service="task-svc"\} \d/m));
    });
  });
});
