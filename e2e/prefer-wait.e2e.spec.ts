import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import type { ServiceName } from '@labelflow/contracts';
import { eventually, metricValue, queryRows, startStack, type HttpResult, type TestStack } from '@labelflow/testing';
import { annotatorOf, claim, createProject, createTask, key, reviewerOf } from './saga';

type ErrorBody = { error: { code: string } };
type TaskView = { status: string; attempt: number };

describe('waiting instead of polling (Prefer: wait)', () => {
  let stack: TestStack;
  beforeAll(async () => {
    // The fallback re-check comes later than any wait here: every wake before a deadline is a signal.
    const recheck = { LONG_POLL_RECHECK_MS: '60000' };
    stack = await startStack(inject('infra'), { 'task-svc': recheck, 'label-svc': recheck, 'qa-svc': recheck });
  });
  afterAll(async () => stack?.stop());

  /**
   * Resolves once `service` holds a request of `route` waiting for a signal: its first attempt was
   * answered "not yet" (or did not meet the conditions), so what the test does next happens while
   * that request waits.
   */
  const waiting = (service: ServiceName, route: string) =>
    eventually(async () => expect(metricValue(await stack.metrics(service), 'http_long_polls_waiting', { route })).toBe(1), { timeoutMs: 10_000, intervalMs: 50 });
  const settledPolls = async (service: ServiceName, route: string) => metricValue(await stack.metrics(service), 'http_long_polls_total', { route, outcome: 'settled' });
  /** Waits ended by the task's signal, not by the fallback re-check (set beyond every wait of this stack). */
  const signalled = async (service: ServiceName, route: string) => metricValue(await stack.metrics(service), 'http_long_poll_wakeups_total', { route, cause: 'signal' });
  const labelsBody = (annotatorId: string) => ({ annotatorId, annotations: [{ label: 'cat', confidence: 0.9 }] });
  /** Labels submitted by `annotatorId` herself, an annotator of the task's project. */
  const labels = async (taskId: string, annotatorId: string, headers: Record<string, string> = {}) =>
    stack.http('label-svc', await annotatorOf(stack, taskId, annotatorId)).post<ErrorBody & { status: string; attempt: number; eventId: string }>(`/tasks/${taskId}/labels`, labelsBody(annotatorId), headers);
  /** The decision of a reviewer of the task's project. */
  const review = async (taskId: string, decision: 'approve' | 'reject', headers: Record<string, string> = {}) =>
    stack.http('qa-svc', await reviewerOf(stack, taskId)).post<ErrorBody & { status: string; attempt: number }>(`/reviews/${taskId}`, { decision, ...(decision === 'reject' ? { reason: 'boxes too loose' } : {}) }, headers);
  const readTask = (taskId: string, query: string, headers: Record<string, string> = {}) => stack.http('task-svc').get<TaskView>(`/tasks/${taskId}${query}`, headers);
  const code = (res: HttpResult<ErrorBody>) => res.body.error?.code;

  it('answers a labels POST sent with Prefer: wait before the claim reached label-svc with 201 once it arrives, in one request; without the header the immediate 409 remains', async () => {
    const route = 'POST /tasks/:taskId/labels';
    const projectId = await createProject(stack, 1_000, 100);
    const taskId = await createTask(stack, projectId);

    const unclaimed = await labels(taskId, 'ann-w');
    expect(unclaimed.status).toBe(409);
    expect(code(unclaimed)).toBe('ASSIGNMENT_UNKNOWN');
    expect(unclaimed.headers.get('preference-applied')).toBeNull();

    const settledBefore = await settledPolls('label-svc', route);
    const signalledBefore = await signalled('label-svc', route);
    const idempotencyKey = key();
    const held = labels(taskId, 'ann-w', { prefer: 'respond-async, wait=30', ...idempotencyKey });
    await waiting('label-svc', route);
    await claim(stack, taskId, 'ann-w');

    const accepted = await held;
    expect(accepted.status, JSON.stringify(accepted.body)).toBe(201);
    expect(accepted.body).toMatchObject({ taskId, attempt: 1, status: 'submitted' });
    expect(accepted.headers.get('preference-applied')).toBe('wait=30');
    expect(await settledPolls('label-svc', route)).toBe(settledBefore + 1);
    expect(await signalled('label-svc', route)).toBeGreaterThan(signalledBefore);

    // The attempts before the claim stored nothing under the key; the one that succeeded did, once.
    const replay = await labels(taskId, 'ann-w', idempotencyKey);
    expect(replay.status).toBe(201);
    expect(replay.headers.get('idempotent-replayed')).toBe('true');
    expect(replay.body.eventId).toBe(accepted.body.eventId);
    const rows = await queryRows<{ attempt: number }>(stack.databases['label-svc'], 'SELECT attempt FROM labels WHERE task_id = $1', [taskId]);
    expect(rows).toEqual([{ attempt: 1 }]);
    const submitted = await queryRows<{ n: string }>(stack.databases['label-svc'], `SELECT count(*) AS n FROM outbox WHERE message_key = $1 AND event_type = 'LabelSubmitted'`, [taskId]);
    expect(Number(submitted[0]!.n)).toBe(1);
  });

  it('answers a review POST sent with Prefer: wait before the labels reached qa-svc once they arrive, in one request; without the header the immediate 404 remains', async () => {
    const route = 'POST /reviews/:taskId';
    const projectId = await createProject(stack, 1_000, 100);
    const taskId = await createTask(stack, projectId);
    await claim(stack, taskId, 'ann-r');

    const early = await review(taskId, 'approve');
    expect(early.status).toBe(404);
    expect(code(early)).toBe('REVIEW_NOT_FOUND');
    expect(early.headers.get('preference-applied')).toBeNull();

    const signalledBefore = await signalled('qa-svc', route);
    const held = review(taskId, 'approve', { prefer: 'wait=30', ...key() });
    await waiting('qa-svc', route);
    // The labels wait for the claim in the same way: one request whatever Kafka's timing.
    const submitted = await labels(taskId, 'ann-r', { prefer: 'wait=30', ...key() });
    expect(submitted.status, JSON.stringify(submitted.body)).toBe(201);

    const decided = await held;
    expect(decided.status, JSON.stringify(decided.body)).toBe(200);
    expect(decided.body).toMatchObject({ taskId, attempt: 1, status: 'passed' });
    expect(decided.headers.get('preference-applied')).toBe('wait=30');
    expect(await signalled('qa-svc', route)).toBeGreaterThan(signalledBefore);
  });

  it('holds GET /tasks/:taskId with conditions and Prefer: wait until the task is settled, or answers the current task when the wait is over', async () => {
    const route = 'GET /tasks/:taskId';
    const projectId = await createProject(stack, 1_000, 100);
    const taskId = await createTask(stack, projectId);
    await claim(stack, taskId, 'ann-s');
    expect((await labels(taskId, 'ann-s', { prefer: 'wait=30' })).status).toBe(201);

    const signalledBefore = await signalled('task-svc', route);
    const settled = readTask(taskId, '?status=completed,failed,cancelled', { prefer: 'wait=30' });
    await waiting('task-svc', route);
    expect((await review(taskId, 'approve', { prefer: 'wait=30' })).status).toBe(200);
    const final = await settled;
    expect(final.status).toBe(200);
    expect(final.body).toMatchObject({ taskId, status: 'completed', attempt: 1 });
    expect(final.headers.get('preference-applied')).toBe('wait=30');
    expect(await signalled('task-svc', route)).toBeGreaterThan(signalledBefore);

    // Conditions that will never hold: the current task once the (short) wait is over; the client checks.
    const unmet = await readTask(taskId, '?minAttempt=2', { prefer: 'wait=1' });
    expect(unmet.status).toBe(200);
    expect(unmet.body).toMatchObject({ status: 'completed', attempt: 1 });
    expect(unmet.headers.get('preference-applied')).toBe('wait=1');
    // Without Prefer (or without conditions) nothing waits, and no preference is reported as applied.
    for (const [query, headers] of [['?minAttempt=2', {}], ['', { prefer: 'wait=10' }]] as const) {
      const now = await readTask(taskId, query, headers);
      expect(now.body.status).toBe('completed');
      expect(now.headers.get('preference-applied')).toBeNull();
    }
  });

  it('holds GET /tasks/:taskId?status=open&minAttempt=2 until a rejection reopened the task', async () => {
    const route = 'GET /tasks/:taskId';
    const projectId = await createProject(stack, 1_000, 100);
    const taskId = await createTask(stack, projectId);
    await claim(stack, taskId, 'ann-o');
    expect((await labels(taskId, 'ann-o', { prefer: 'wait=30' })).status).toBe(201);

    const reopened = readTask(taskId, '?status=open&minAttempt=2', { prefer: 'wait=30' });
    await waiting('task-svc', route);
    expect((await review(taskId, 'reject', { prefer: 'wait=30' })).status).toBe(200);
    const task = await reopened;
    expect(task.status).toBe(200);
    expect(task.body).toMatchObject({ status: 'open', attempt: 2 });
  });

  it('refuses malformed wait conditions with 400 VALIDATION_FAILED naming them', async () => {
    const projectId = await createProject(stack, 1_000, 100);
    const taskId = await createTask(stack, projectId);
    for (const [query, path] of [
      ['?status=done', 'query.status.0'],
      ['?status=open,', 'query.status.1'],
      ['?minAttempt=0', 'query.minAttempt'],
      ['?minAttempt=two', 'query.minAttempt'],
      // A misspelt condition would be no condition: answered at once, and a client would busy-loop.
      ['?stauts=open', 'query'],
    ] as const) {
      const res = await stack.http('task-svc').get<{ error: { code: string; details: { path: string }[] } }>(`/tasks/${taskId}${query}`, { prefer: 'wait=5' });
      expect(res.status, query).toBe(400);
      expect(res.body.error.code).toBe('VALIDATION_FAILED');
      expect(res.body.error.details.map((d) => d.path), query).toEqual([path]);
    }
  });
});
