import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { as, eventually, GiveUp, queryRows, startStack, type TestStack } from '@labelflow/testing';
import { formatReport } from '@labelflow/auditor';
import { auditStack, expectAuditClean } from './audit';
import { annotatorOf, claim, createProject, createTask, key, labelsView, review, submitLabels, waitForStatus } from './saga';

const rows = <R extends Record<string, unknown>>(stack: TestStack, svc: Parameters<TestStack['http']>[0], sql: string, values: unknown[]) => queryRows<R>(stack.databases[svc], sql, values);
const ledgerOf = async (stack: TestStack, taskId: string) =>
  (await rows<{ kind: string; attempt: number; amount: string }>(stack, 'billing-svc', 'SELECT kind, attempt, amount FROM ledger WHERE task_id = $1 ORDER BY id', [taskId])).map((e) => [e.kind, e.attempt, Number(e.amount)]);
const labelStatuses = async (stack: TestStack, taskId: string) => (await rows<{ attempt: number; status: string }>(stack, 'label-svc', 'SELECT attempt, status FROM labels WHERE task_id = $1 ORDER BY attempt', [taskId])).map((l) => [l.attempt, l.status]);
const reviewStatuses = async (stack: TestStack, taskId: string) => (await rows<{ attempt: number; status: string }>(stack, 'qa-svc', 'SELECT attempt, status FROM reviews WHERE task_id = $1 ORDER BY attempt', [taskId])).map((r) => [r.attempt, r.status]);
const MAX = Number.MAX_SAFE_INTEGER;
/** The task as task-svc shows it; any answer but 200 fails the test at once, also inside `eventually`. */
const task = async (stack: TestStack, taskId: string) => {
  const res = await stack.http('task-svc').get<{ status: string; attempt: number; reason: string | null }>(`/tasks/${taskId}`);
  if (res.status !== 200) throw new GiveUp(`GET /tasks/${taskId} answered ${res.status}: ${JSON.stringify(res.body)}`);
  return res.body;
};

describe('saga failure scenarios', () => {
  const infra = inject('infra');
  let stack: TestStack;
  beforeAll(async () => {
    stack = await startStack(infra, { 'billing-svc': { FAULT_BILLING_FAILURE_PREFIX: 'fail-' } });
  });
  afterAll(async () => stack?.stop());

  it('fails the task when the budget runs out, compensates every service, and completes it once billing is retried after a top-up', async () => {
    const projectId = await createProject(stack, 100, 300);
    const taskId = await createTask(stack, projectId);
    await claim(stack, taskId, 'ann-b');
    await submitLabels(stack, taskId, 'ann-b');
    await review(stack, taskId, 'approve');
    await waitForStatus(stack, taskId, 'failed');
    expect((await task(stack, taskId)).reason).toMatch(/^INSUFFICIENT_BUDGET/);
    await eventually(async () => {
      expect(await labelStatuses(stack, taskId)).toEqual([[1, 'voided']]);
      expect(await reviewStatuses(stack, taskId)).toEqual([[1, 'revoked']]);
    });
    expect(await ledgerOf(stack, taskId)).toEqual([]);
    await expectAuditClean(stack, infra.kafkaBrokers);

    const billing = stack.http('billing-svc');
    expect((await billing.post(`/tasks/${taskId}/billing/retry`)).status).toBe(409);
    expect((await billing.post(`/projects/${projectId}/top-ups`, { amount: 1_000 }, key())).status).toBe(200);
    expect((await billing.as(as.annotator('ann-b', projectId)).post(`/tasks/${taskId}/billing/retry`)).status).toBe(403);
    expect((await billing.post(`/tasks/${taskId}/billing/retry`)).status).toBe(200);
    await waitForStatus(stack, taskId, 'completed');
    await eventually(async () => {
      expect(await labelStatuses(stack, taskId)).toEqual([[1, 'accepted']]);
      expect(await reviewStatuses(stack, taskId)).toEqual([[1, 'passed']]);
    });
    expect(await ledgerOf(stack, taskId)).toEqual([['debit', 1, 300], ['credit', 1, 300]]);
    expect((await billing.get<{ balance: number }>(`/projects/${projectId}`)).body.balance).toBe(800);
    await expectAuditClean(stack, infra.kafkaBrokers);
  });

  it('fails the task on an injected billing failure and leaves nothing billed', async () => {
    const projectId = await createProject(stack, 10_000, 300);
    const taskId = await createTask(stack, projectId);
    await claim(stack, taskId, 'fail-ann');
    await submitLabels(stack, taskId, 'fail-ann');
    await review(stack, taskId, 'approve');
    await waitForStatus(stack, taskId, 'failed');
    expect((await task(stack, taskId)).reason).toMatch(/^INJECTED_FAILURE/);
    expect(await ledgerOf(stack, taskId)).toEqual([]);
    await expectAuditClean(stack, infra.kafkaBrokers);
  });

  /** Every invariant holds, and no service dead-lettered anything on the way. */
  const expectAuditCleanAndNothingDeadLettered = async () => {
    await expectAuditClean(stack, infra.kafkaBrokers);
    const report = await auditStack(stack, infra.kafkaBrokers);
    expect(report.deadLetters, formatReport(report)).toEqual([]);
  };

  it('fails the task with PAYOUT_LIMIT_EXCEEDED when paying the annotator would pass the largest exact amount, compensates every service and dead-letters nothing', async () => {
    const annotator = 'ann-near-limit';
    const held = MAX - 100;
    // The annotator was already paid almost the largest amount a balance can hold, for one task of
    // a project that pays that much: history the audit can account for, task by task.
    const lucrative = await createProject(stack, held, held);
    const paid = await createTask(stack, lucrative);
    await claim(stack, paid, annotator);
    await submitLabels(stack, paid, annotator);
    await review(stack, paid, 'approve');
    await waitForStatus(stack, paid, 'completed');
    const projectId = await createProject(stack, 10_000, 300);
    const taskId = await createTask(stack, projectId);
    await claim(stack, taskId, annotator);
    await submitLabels(stack, taskId, annotator);
    await review(stack, taskId, 'approve');

    await waitForStatus(stack, taskId, 'failed');
    expect((await task(stack, taskId)).reason).toMatch(/^PAYOUT_LIMIT_EXCEEDED: /);
    await eventually(async () => {
      expect(await labelStatuses(stack, taskId)).toEqual([[1, 'voided']]);
      expect(await reviewStatuses(stack, taskId)).toEqual([[1, 'revoked']]);
    });
    const billing = stack.http('billing-svc');
    const billed = await billing.get<{ billings: { attempt: number; status: string; reason: string }[]; ledger: unknown[] }>(`/tasks/${taskId}/billing`);
    expect(billed.body.billings.map((b) => [b.attempt, b.status, b.reason])).toEqual([[1, 'failed', 'PAYOUT_LIMIT_EXCEEDED']]);
    expect(billed.body.ledger).toEqual([]);
    expect((await billing.get<{ balances: Record<string, number> }>(`/annotators/${annotator}/payouts`)).body.balances).toEqual({ USD: held });
    expect((await billing.get<{ balance: number }>(`/projects/${projectId}`)).body.balance).toBe(10_000);
    const retried = await billing.post<{ error: { code: string } }>(`/tasks/${taskId}/billing/retry`);
    expect([retried.status, retried.body.error.code]).toEqual([409, 'PAYOUT_LIMIT_EXCEEDED']);
    expect((await task(stack, taskId)).status).toBe('failed');
    await expectAuditCleanAndNothingDeadLettered();
  });

  it('keeps room in a project balance for every refund: a top-up that would leave none is refused, and a cancelled task is refunded in full up to the largest balance', async () => {
    const projectId = await createProject(stack, 1_000, 250);
    const taskId = await createTask(stack, projectId, 'refunded at the largest balance');
    await claim(stack, taskId, 'ann-e');
    await submitLabels(stack, taskId, 'ann-e');
    await review(stack, taskId, 'approve');
    await waitForStatus(stack, taskId, 'completed');

    // 750 left and 250 billed: a balance topped up to the largest amount could not take the 250 back.
    const billing = stack.http('billing-svc');
    const over = await billing.post<{ error?: { code: string } }>(`/projects/${projectId}/top-ups`, { amount: MAX - 750 }, key());
    expect([over.status, over.body.error?.code]).toEqual([422, 'BUDGET_OVERFLOW']);
    const most = await billing.post<{ balance: number }>(`/projects/${projectId}/top-ups`, { amount: MAX - 1_000 }, key());
    expect([most.status, most.body.balance]).toEqual([200, MAX - 250]);

    expect((await stack.http('task-svc').post(`/tasks/${taskId}/cancel`, { reason: 'customer withdrew the sample' })).status).toBe(200);
    await eventually(async () => expect((await billing.get<{ balance: number }>(`/projects/${projectId}`)).body.balance).toBe(MAX));
    expect(await ledgerOf(stack, taskId)).toEqual([['debit', 1, 250], ['credit', 1, 250], ['refund', 1, 250], ['reversal', 1, 250]]);
    await expectAuditCleanAndNothingDeadLettered();
  });

  it.each([
    ['open', async (_s: TestStack, _t: string) => undefined],
    ['assigned', async (s: TestStack, t: string) => claim(s, t, 'ann-c')],
    ['in review', async (s: TestStack, t: string) => (await claim(s, t, 'ann-c'), await submitLabels(s, t, 'ann-c'))],
    ['completed', async (s: TestStack, t: string) => (await claim(s, t, 'ann-c'), await submitLabels(s, t, 'ann-c'), await review(s, t, 'approve'), await waitForStatus(s, t, 'completed'))],
  ])('cancels a task that is %s: every service compensates and nothing stays billed', async (stage, advance) => {
    const projectId = await createProject(stack, 1_000, 250);
    const taskId = await createTask(stack, projectId, `cancel when ${stage}`);
    await advance(stack, taskId);
    const res = await stack.http('task-svc').post<{ status: string }>(`/tasks/${taskId}/cancel`, { reason: 'customer withdrew the sample' });
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    expect(res.body.status).toBe('cancelled');
    expect((await stack.http('task-svc').post(`/tasks/${taskId}/cancel`, { reason: 'again' })).status).toBe(200);
    expect((await stack.http('task-svc', as.annotator('ann-c', projectId)).post(`/tasks/${taskId}/cancel`, { reason: 'not a manager' })).status).toBe(403);

    // Once every event is consumed the compensations are final: checked then, not polled (a
    // condition already true before the cancel reached anyone would pass a poll at once).
    await stack.quiesce();
    const labelled = stage === 'in review' || stage === 'completed';
    expect(await labelStatuses(stack, taskId)).toEqual(labelled ? [[1, 'voided']] : []);
    // In review, qa-svc may read TaskCancelled before LabelSubmitted (two topics) and never open the review.
    const reviews = await reviewStatuses(stack, taskId);
    if (stage === 'completed') expect(reviews).toEqual([[1, 'revoked']]);
    else if (stage === 'in review') expect(reviews.filter(([, s]) => s !== 'voided')).toEqual([]);
    else expect(reviews).toEqual([]);
    const balance = await stack.http('billing-svc').get<{ balance: number }>(`/projects/${projectId}`);
    expect([balance.status, balance.body.balance]).toEqual([200, 1_000]);
    if (stage === 'completed') expect(await ledgerOf(stack, taskId)).toEqual([['debit', 1, 250], ['credit', 1, 250], ['refund', 1, 250], ['reversal', 1, 250]]);
    expect((await task(stack, taskId)).status).toBe('cancelled');
    await expectAuditClean(stack, infra.kafkaBrokers);
  });
});

describe('the assignment lease', () => {
  const infra = inject('infra');
  let stack: TestStack;
  beforeAll(async () => {
    stack = await startStack(infra, { 'task-svc': { ASSIGNMENT_LEASE_MS: '1500', ASSIGNMENT_LEASE_GRACE_MS: '0', SWEEP_INTERVAL_MS: '100' } });
  });
  afterAll(async () => stack?.stop());

  it('returns a task to the pool as a new attempt when the annotator never submits', async () => {
    const projectId = await createProject(stack, 1_000, 100);
    const taskId = await createTask(stack, projectId);
    await claim(stack, taskId, 'ann-slow');
    await eventually(async () => expect(await task(stack, taskId)).toMatchObject({ status: 'open', attempt: 2 }), { timeoutMs: 20_000 });
    // Once: whether label-svc has read the reopen yet (then no assignment) or not (then a lease past its end), the answer is final.
    const late = await stack.http('label-svc', await annotatorOf(stack, taskId, 'ann-slow')).post<{ error: { code: string } }>(`/tasks/${taskId}/labels`, { annotatorId: 'ann-slow', annotations: [{ label: 'late' }] });
    expect(late.status, JSON.stringify(late.body)).toBe(409);
    expect(['LEASE_EXPIRED', 'ASSIGNMENT_UNKNOWN']).toContain(late.body.error.code);
    await expectAuditClean(stack, infra.kafkaBrokers);
  });
});

describe('the assignment lease after task-svc was down', () => {
  const infra = inject('infra');
  let stack: TestStack;
  // A lease long enough for any machine to claim, see the claim reach label-svc and submit within
  // it; the test then ends it while task-svc is down, as the clock would have.
  const env = { ASSIGNMENT_LEASE_MS: '600000', ASSIGNMENT_LEASE_GRACE_MS: '0', SWEEP_INTERVAL_MS: '100' };
  beforeAll(async () => {
    stack = await startStack(infra, { 'task-svc': env });
  });
  afterAll(async () => stack?.stop());

  it('does not reopen a task whose labels were submitted in time but are still unread when it restarts past the lease', async () => {
    const projectId = await createProject(stack, 1_000, 100);
    const taskId = await createTask(stack, projectId);
    await claim(stack, taskId, 'ann-in-time');
    await eventually(async () => expect((await labelsView(stack, taskId)).assignment?.annotatorId).toBe('ann-in-time'));
    await stack.processes['task-svc'].kill();
    // Within the lease: label-svc accepts, and LabelSubmitted waits in Kafka for task-svc.
    await submitLabels(stack, taskId, 'ann-in-time');
    // The lease ends while task-svc is down: its sweeper finds it over as soon as it restarts.
    const ended = await rows<{ task_id: string }>(stack, 'task-svc', "UPDATE tasks SET lease_expires_at = now() - interval '1 second' WHERE task_id = $1 AND status = 'assigned' RETURNING task_id", [taskId]);
    expect(ended).toHaveLength(1);
    await stack.start('task-svc', env);

    await stack.quiesce();
    expect(await task(stack, taskId)).toMatchObject({ attempt: 1, status: 'in_review' });
    const reopened = await rows<{ n: string }>(stack, 'task-svc', `SELECT count(*) AS n FROM outbox WHERE event_type = 'TaskReopened' AND message_key = $1`, [taskId]);
    expect(Number(reopened[0]?.n)).toBe(0);
    await expectAuditClean(stack, infra.kafkaBrokers);
  });
});

describe('the review deadline', () => {
  const infra = inject('infra');
  let stack: TestStack;
  // The sweepers of the first qa-svc instances never run during the test, so the deadline cannot
  // fire before they are stopped: only the restarted instances, reading it from PostgreSQL, can.
  const asleep = { QA_SLA_MS: '1000', SWEEP_INTERVAL_MS: '3600000' };
  const awake = { QA_SLA_MS: '1000', SWEEP_INTERVAL_MS: '100' };
  beforeAll(async () => {
    stack = await startStack(infra, { 'qa-svc': asleep });
  });
  afterAll(async () => stack?.stop());

  it('times out a review exactly once, from its stored deadline, across a restart and two qa-svc instances, and reworks the task', async () => {
    const projectId = await createProject(stack, 1_000, 100);
    const taskId = await createTask(stack, projectId);
    const second = await stack.startExtra('qa-svc', asleep);
    await claim(stack, taskId, 'ann-q');
    await submitLabels(stack, taskId, 'ann-q');
    await eventually(async () => expect(await reviewStatuses(stack, taskId)).toEqual([[1, 'pending']]));
    await stack.processes['qa-svc'].stop();
    await second.stop();
    expect(await reviewStatuses(stack, taskId)).toEqual([[1, 'pending']]);
    const deadline = (await rows<{ deadline_at: Date }>(stack, 'qa-svc', 'SELECT deadline_at FROM reviews WHERE task_id = $1', [taskId]))[0]?.deadline_at;
    expect(deadline).toBeInstanceOf(Date);
    await eventually(async () => expect((await rows<{ past: boolean }>(stack, 'qa-svc', 'SELECT now() > $1::timestamptz AS past', [deadline]))[0]?.past).toBe(true), { timeoutMs: 10_000 });
    await Promise.all([stack.start('qa-svc', awake), stack.startExtra('qa-svc', awake)]);

    await eventually(async () => expect(await task(stack, taskId)).toMatchObject({ status: 'open', attempt: 2 }), { timeoutMs: 20_000 });
    await eventually(async () => expect(await labelStatuses(stack, taskId)).toEqual([[1, 'voided']]));
    expect(await reviewStatuses(stack, taskId)).toEqual([[1, 'timed_out']]);
    const fired = await rows<{ n: string }>(stack, 'qa-svc', `SELECT count(*) AS n FROM outbox WHERE event_type = 'QaTimedOut' AND message_key = $1`, [taskId]);
    expect(Number(fired[0]?.n)).toBe(1);
    await expectAuditClean(stack, infra.kafkaBrokers);
  });
});
