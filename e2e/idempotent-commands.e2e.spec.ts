import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { as, httpClient, queryRows, startStack, type TestStack } from '@labelflow/testing';
import { claim, createProject, createTask, key, submitLabels } from './saga';

describe('idempotent HTTP commands across the services', () => {
  let stack: TestStack;
  let projectId: string;
  beforeAll(async () => {
    stack = await startStack(inject('infra'));
    projectId = await createProject(stack, 10_000, 100);
  });
  afterAll(async () => stack?.stop());

  it('replays a retried task creation instead of creating a second task, and names the key as the cause of its events', async () => {
    const headers = key();
    const body = { projectId, title: 'retried creation', dataUri: 's3://b/retry.jpg' };
    const first = await stack.http('task-svc').post<{ taskId: string }>('/tasks', body, headers);
    const again = await stack.http('task-svc').post<{ taskId: string }>('/tasks', body, headers);
    expect(first.status).toBe(201);
    expect(again.status).toBe(201);
    expect(again.body).toEqual(first.body);
    expect(again.headers.get('idempotent-replayed')).toBe('true');
    const created = await queryRows<{ n: string }>(stack.databases['task-svc'], `SELECT count(*) AS n FROM tasks WHERE title = 'retried creation'`);
    expect(Number(created[0]?.n)).toBe(1);
    const events = await queryRows<{ payload: { causationId?: string } }>(stack.databases['task-svc'], `SELECT payload FROM outbox WHERE message_key = $1`, [first.body.taskId]);
    expect(events.map((e) => e.payload.causationId)).toEqual([headers['idempotency-key']]);
  });

  it('answers 400 without a key where one is required, 422 when a key is reused for another request', async () => {
    const missing = await stack.http('task-svc').post<{ code: string }>('/tasks', { projectId, title: 'no key', dataUri: 's3://b/x.jpg' });
    expect(missing.status).toBe(400);
    expect(missing.body.code).toBe('IDEMPOTENCY_KEY_REQUIRED');
    const headers = key();
    expect((await stack.http('billing-svc').post(`/projects/${projectId}/top-ups`, { amount: 100 }, headers)).status).toBe(200);
    const reused = await stack.http('billing-svc').post<{ code: string }>(`/projects/${projectId}/top-ups`, { amount: 999 }, headers);
    expect(reused.status).toBe(422);
    expect(reused.body.code).toBe('IDEMPOTENCY_KEY_REUSED');
    const replayed = await stack.http('billing-svc').post<{ balance: number }>(`/projects/${projectId}/top-ups`, { amount: 100 }, headers);
    expect(replayed.headers.get('idempotent-replayed')).toBe('true');
    expect((await stack.http('billing-svc').get<{ balance: number }>(`/projects/${projectId}`)).body.balance).toBe(10_100);
  });

  it('gives a double-clicked label submission its first answer instead of a conflict', async () => {
    const taskId = await createTask(stack, projectId);
    await claim(stack, taskId, 'ann-dbl');
    const headers = key();
    const body = { annotatorId: 'ann-dbl', attempt: 1, annotations: [{ label: 'cat' }] };
    await submitLabels(stack, taskId, 'ann-dbl', body, headers);
    const second = await stack.http('label-svc', as.annotator('ann-dbl', projectId)).post<{ status: string }>(`/tasks/${taskId}/labels`, body, headers);
    expect(second.status).toBe(201);
    expect(second.headers.get('idempotent-replayed')).toBe('true');
  });

  it('hides who won a contested claim from annotators but tells one who may see people, a manager of the project who annotates too', async () => {
    const taskId = await createTask(stack, projectId);
    await claim(stack, taskId, 'ann-winner');
    const task = stack.http('task-svc');
    const loser = await task.as(as.annotator('ann-loser', projectId)).post<{ error: { code: string; details?: unknown } }>(`/tasks/${taskId}/claim`, {});
    expect(loser.status).toBe(409);
    expect(JSON.stringify(loser.body)).not.toContain('ann-winner');
    const lead = { user: 'lead-1', projects: { [projectId]: ['manager', 'annotator'] } } as const;
    const asManager = await task.as(lead).post<{ error: { code: string; details?: { assignee?: string } } }>(`/tasks/${taskId}/claim`, {});
    expect([asManager.status, asManager.body.error.code]).toEqual([409, 'TASK_NOT_CLAIMABLE']);
    expect(asManager.body.error.details?.assignee).toBe('ann-winner');
    // A platform admin sees every assignee but never claims.
    const asAdmin = await task.post<{ error: { code: string } }>(`/tasks/${taskId}/claim`, {});
    expect([asAdmin.status, asAdmin.body.error.code]).toEqual([403, 'FORBIDDEN']);
  });
});

describe('a service killed after committing a command and before answering', () => {
  let stack: TestStack;
  beforeAll(async () => {
    stack = await startStack(inject('infra'), { 'task-svc': { FAULT_KILL_BEFORE_REPLY: '1' } });
  });
  afterAll(async () => stack?.stop());

  it('answers the retry of the client with the stored response, and the task exists once', async () => {
    const projectId = await createProject(stack, 1_000, 100);
    const headers = key();
    const body = { projectId, title: 'crash before reply', dataUri: 's3://b/crash.jpg' };
    const lost = await httpClient(stack.processes['task-svc'].url).post('/tasks', body, headers).catch((error: Error) => error);
    expect(lost).toBeInstanceOf(Error);
    expect((await stack.processes['task-svc'].exited).signal).toBe('SIGKILL');
    const committed = await queryRows<{ task_id: string }>(stack.databases['task-svc'], `SELECT task_id FROM tasks WHERE title = 'crash before reply'`);
    expect(committed).toHaveLength(1);

    await stack.start('task-svc', { FAULT_KILL_BEFORE_REPLY: '0' });
    const retry = await stack.http('task-svc').post<{ taskId: string }>('/tasks', body, headers);
    expect(retry.status).toBe(201);
    expect(retry.headers.get('idempotent-replayed')).toBe('true');
    expect(retry.body.taskId).toBe(committed[0]?.task_id);
    expect(await queryRows(stack.databases['task-svc'], `SELECT 1 FROM tasks WHERE title = 'crash before reply'`)).toHaveLength(1);
  });
});
