import { randomInt, randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { EventId, ProjectId, TaskId, topicName, topicOf, TopicSchemas, type EventType, type ServiceName } from '@labelflow/contracts';
import { composeSnowflake, MAX_SEQUENCE, MAX_WORKER_ID } from '@labelflow/idgen';
import { as, eventually, metricValue, produceRaw, queryRows, startStack, type TestStack } from '@labelflow/testing';
import { auditStack, expectAuditClean } from './audit';
import { claim, createProject, createTask, review, submitLabels, waitForStatus } from './saga';

/**
 * Events built by hand and produced raw, one at a time, each only once the previous one has been
 * consumed where it matters: the order every service sees is the one the test chose, whatever the
 * topics and partitions involved.
 */
interface Planted {
  readonly taskId: string;
  readonly projectId: string;
  readonly attempt: number;
}

/** A fresh id of the kind the contract asks for: a UUID, or a 64-bit Snowflake id (task and event ids). */
const freshId = (schema: typeof TaskId | typeof EventId | typeof ProjectId): string => {
  const uuid = randomUUID();
  return schema.safeParse(uuid).success ? uuid : composeSnowflake({ timestampMs: Date.now(), workerId: randomInt(MAX_WORKER_ID + 1), sequence: randomInt(MAX_SEQUENCE + 1) });
};

function envelope(type: EventType, producer: ServiceName, { taskId, projectId, attempt }: Planted, payload: Record<string, unknown>) {
  const event = { id: freshId(EventId), type, version: 1, taskId, projectId, attempt, occurredAt: new Date().toISOString(), producer, payload };
  const key = topicOf(type);
  // Validated here with the topic's own schema: a typo must fail the test, not end in a dead letter.
  return { key, event: TopicSchemas[key].parse(event) };
}

async function produceEvent(stack: TestStack, brokers: string, planted: ReturnType<typeof envelope>): Promise<void> {
  const { key, event } = planted;
  await produceRaw(brokers, topicName(stack.prefix, key), [
    { key: event.taskId, value: JSON.stringify(event), headers: { 'event-type': event.type, 'event-version': String(event.version) } },
  ]);
}

const rows = <R extends Record<string, unknown>>(stack: TestStack, svc: ServiceName, sql: string, values: unknown[]) => queryRows<R>(stack.databases[svc], sql, values);
const count = async (stack: TestStack, svc: ServiceName, sql: string, values: unknown[]) => Number((await rows<{ n: string }>(stack, svc, sql, values))[0]?.n);
const ledgerOf = async (stack: TestStack, taskId: string) =>
  (await rows<{ kind: string; attempt: number; amount: string }>(stack, 'billing-svc', 'SELECT kind, attempt, amount FROM ledger WHERE task_id = $1 ORDER BY id', [taskId])).map((e) => [e.kind, e.attempt, Number(e.amount)]);
const labelsOf = async (stack: TestStack, taskId: string) =>
  (await rows<{ attempt: number; status: string; void_reason: string | null }>(stack, 'label-svc', 'SELECT attempt, status, void_reason FROM labels WHERE task_id = $1 ORDER BY attempt', [taskId])).map((l) => [l.attempt, l.status, l.void_reason]);
const reviewsOf = async (stack: TestStack, taskId: string) =>
  (await rows<{ attempt: number; status: string }>(stack, 'qa-svc', 'SELECT attempt, status FROM reviews WHERE task_id = $1 ORDER BY attempt', [taskId])).map((r) => [r.attempt, r.status]);
const outboxOf = async (stack: TestStack, svc: ServiceName, taskId: string) =>
  (await rows<{ event_type: string; attempt: number }>(stack, svc, `SELECT event_type, (payload->>'attempt')::int AS attempt FROM outbox WHERE message_key = $1 ORDER BY id`, [taskId])).map((o) => [o.event_type, o.attempt]);
/** Whether `svc` has consumed (applied, ignored or refused) the event of this type and attempt: its inbox key commits with the reaction. */
const consumed = async (stack: TestStack, svc: ServiceName, taskId: string, type: EventType, attempt: number) =>
  (await count(stack, svc, 'SELECT count(*) AS n FROM inbox WHERE task_id = $1 AND event_type = $2 AND attempt = $3', [taskId, type, attempt])) === 1;
const balanceOf = async (stack: TestStack, projectId: string) => (await stack.http('billing-svc').get<{ balance: number }>(`/projects/${projectId}`)).body.balance;
const taskView = async (stack: TestStack, taskId: string) => (await stack.http('task-svc').get<{ status: string; attempt: number; assignee: string | null }>(`/tasks/${taskId}`)).body;
/** How many consumed events of `type` a service refused with `code` so far (its metric, counted as each batch commits). */
const ignoredCount = async (stack: TestStack, svc: ServiceName, type: EventType, code: string) => metricValue(await stack.metrics(svc), 'consumer_ignored_total', { type, code });

/**
 * Everything produced so far was consumed, and everything that consuming it emitted was published
 * and consumed in turn: no consumer lag and no unpublished outbox row, twice in a row.
 */

describe('compensations that arrive before the event they compensate, and stale events', () => {
  const infra = inject('infra');
  const brokers = infra.kafkaBrokers;
  let stack: TestStack;
  beforeAll(async () => {
    stack = await startStack(infra);
  });
  afterAll(async () => stack?.stop());

  /** Every planted event was valid: none of them ended on a dead-letter topic. */
  const expectNoDeadLetters = async () => expect((await auditStack(stack, brokers)).deadLetters).toEqual([]);

  it('billing-svc never bills an approval that arrives after the cancellation of its task, and goes on billing other tasks', async () => {
    const budget = 1_000;
    const price = 200;
    const projectId = await createProject(stack, budget, price);
    const planted = { taskId: freshId(TaskId), projectId, attempt: 1 };

    await produceEvent(stack, brokers, envelope('TaskCancelled', 'task-svc', planted, { reason: 'customer withdrew the sample', cancelledBy: 'admin-1', previousStatus: 'approved' }));
    await eventually(async () => {
      const marks = await rows<{ cancelled_at: Date | null }>(stack, 'billing-svc', 'SELECT cancelled_at FROM billing_tasks WHERE task_id = $1', [planted.taskId]);
      expect(marks[0]?.cancelled_at).toBeInstanceOf(Date);
    });

    const refusedBefore = await ignoredCount(stack, 'billing-svc', 'QaPassed', 'TASK_CANCELLED');
    await produceEvent(stack, brokers, envelope('QaPassed', 'qa-svc', planted, { annotatorId: 'ann-late', reviewerId: 'reviewer-1' }));
    await eventually(async () => expect(await consumed(stack, 'billing-svc', planted.taskId, 'QaPassed', 1)).toBe(true));
    // The metric follows the commit of the inbox key: wait for it, too.
    await eventually(async () => expect(await ignoredCount(stack, 'billing-svc', 'QaPassed', 'TASK_CANCELLED')).toBe(refusedBefore + 1));
    await stack.quiesce();

    expect(await ledgerOf(stack, planted.taskId)).toEqual([]);
    expect(await rows(stack, 'billing-svc', 'SELECT * FROM billings WHERE task_id = $1', [planted.taskId])).toEqual([]);
    expect(await outboxOf(stack, 'billing-svc', planted.taskId)).toEqual([]);
    expect(await balanceOf(stack, projectId)).toBe(budget);

    // The consumer did not stop on the refused approval: a normal saga on the same project is billed.
    const taskId = await createTask(stack, projectId);
    await claim(stack, taskId, 'ann-a');
    await submitLabels(stack, taskId, 'ann-a');
    await decide(stack, taskId, { decision: 'approve' });
    await waitForStatus(stack, taskId, 'completed');
    expect(await ledgerOf(stack, taskId)).toEqual([['debit', 1, price], ['credit', 1, price]]);
    expect(await balanceOf(stack, projectId)).toBe(budget - price);
    await expectNoDeadLetters();
    await expectAuditClean(stack, brokers);
  });

  it('qa-svc opens no review for labels that arrive after the cancellation of their task', async () => {
    const planted = { taskId: freshId(TaskId), projectId: freshId(ProjectId), attempt: 1 };

    await produceEvent(stack, brokers, envelope('TaskCancelled', 'task-svc', planted, { reason: 'duplicate sample', cancelledBy: 'admin-1', previousStatus: 'assigned' }));
    await eventually(async () => {
      const marks = await rows<{ cancelled_at: Date | null }>(stack, 'qa-svc', 'SELECT cancelled_at FROM review_tasks WHERE task_id = $1', [planted.taskId]);
      expect(marks[0]?.cancelled_at).toBeInstanceOf(Date);
    });

    const refusedBefore = await ignoredCount(stack, 'qa-svc', 'LabelSubmitted', 'TASK_CANCELLED');
    await produceEvent(stack, brokers, envelope('LabelSubmitted', 'label-svc', planted, { annotatorId: 'ann-b', annotations: [{ label: 'cat', confidence: 0.8 }] }));
    await eventually(async () => expect(await consumed(stack, 'qa-svc', planted.taskId, 'LabelSubmitted', 1)).toBe(true));
    await eventually(async () => expect(await ignoredCount(stack, 'qa-svc', 'LabelSubmitted', 'TASK_CANCELLED')).toBeGreaterThan(refusedBefore));
    await stack.quiesce();

    expect(await reviewsOf(stack, planted.taskId)).toEqual([]);
    expect(await outboxOf(stack, 'qa-svc', planted.taskId)).toEqual([]);
    await expectNoDeadLetters();
    await expectAuditClean(stack, brokers);
  });

  it('label-svc keeps labels voided by a billing failure voided when the approval of the same attempt arrives after it', async () => {
    // No budget: billing-svc's own answer to the approval is a billing failure too, so the saga
    // ends where the planted failure put it (an approval that billing-svc could pay would, rightly,
    // complete the task and accept the labels again).
    const projectId = await createProject(stack, 0, 100);
    const taskId = await createTask(stack, projectId);
    await claim(stack, taskId, 'ann-c');
    await submitLabels(stack, taskId, 'ann-c');
    await eventually(async () => {
      expect(await reviewsOf(stack, taskId)).toEqual([[1, 'pending']]);
      expect(await taskView(stack, taskId)).toMatchObject({ status: 'in_review', attempt: 1 });
    });
    await stack.quiesce();
    expect(await labelsOf(stack, taskId)).toEqual([[1, 'submitted', null]]);
    const attempt1 = { taskId, projectId, attempt: 1 };

    await produceEvent(stack, brokers, envelope('BillingFailed', 'billing-svc', attempt1, { annotatorId: 'ann-c', reason: 'INSUFFICIENT_BUDGET', detail: 'planted ahead of the approval' }));
    await eventually(async () => expect(await labelsOf(stack, taskId)).toEqual([[1, 'voided', 'BILLING_FAILED']]));

    await produceEvent(stack, brokers, envelope('QaPassed', 'qa-svc', attempt1, { annotatorId: 'ann-c', reviewerId: 'reviewer-1' }));
    await eventually(async () => expect(await consumed(stack, 'label-svc', taskId, 'QaPassed', 1)).toBe(true));
    // billing-svc answers the approval with its own failure (no budget); wait until that was consumed too.
    await eventually(async () => expect(await outboxOf(stack, 'billing-svc', taskId)).toEqual([['BillingFailed', 1]]));
    await stack.quiesce();

    expect(await labelsOf(stack, taskId)).toEqual([[1, 'voided', 'BILLING_FAILED']]);
    expect(await taskView(stack, taskId)).toMatchObject({ status: 'failed', attempt: 1 });
    expect(await ledgerOf(stack, taskId)).toEqual([]);
    expect(await balanceOf(stack, projectId)).toBe(0);
    await expectNoDeadLetters();
    await expectAuditClean(stack, brokers);
  });

  it('a BillingFailed replayed from a dead-letter topic after the task was billed leaves labels accepted, the review passed and the task completed', async () => {
    // As `npm run dlq -- replay` would: label-svc and qa-svc never applied this failure (it was
    // dead-lettered), then an admin's retry billed the attempt, then the dead letter comes back.
    const price = 100;
    const projectId = await createProject(stack, 1_000, price);
    const taskId = await createTask(stack, projectId);
    await claim(stack, taskId, 'ann-r');
    await submitLabels(stack, taskId, 'ann-r');
    await eventually(async () => expect(await reviewsOf(stack, taskId)).toEqual([[1, 'pending']]));
    await review(stack, taskId, 'approve');
    await waitForStatus(stack, taskId, 'completed');
    await stack.quiesce();
    expect(await labelsOf(stack, taskId)).toEqual([[1, 'accepted', null]]);
    const attempt1 = { taskId, projectId, attempt: 1 };
    const refusedBefore = { label: await ignoredCount(stack, 'label-svc', 'BillingFailed', 'ALREADY_BILLED'), qa: await ignoredCount(stack, 'qa-svc', 'BillingFailed', 'ALREADY_BILLED') };

    await produceEvent(stack, brokers, envelope('BillingFailed', 'billing-svc', attempt1, { annotatorId: 'ann-r', reason: 'INSUFFICIENT_BUDGET', detail: 'a dead letter from before the retry' }));
    await eventually(async () => {
      expect(await consumed(stack, 'label-svc', taskId, 'BillingFailed', 1)).toBe(true);
      expect(await consumed(stack, 'qa-svc', taskId, 'BillingFailed', 1)).toBe(true);
      expect(await consumed(stack, 'task-svc', taskId, 'BillingFailed', 1)).toBe(true);
    });
    await stack.quiesce();

    expect(await labelsOf(stack, taskId)).toEqual([[1, 'accepted', null]]);
    expect(await reviewsOf(stack, taskId)).toEqual([[1, 'passed']]);
    expect(await taskView(stack, taskId)).toMatchObject({ status: 'completed', attempt: 1 });
    expect(await ledgerOf(stack, taskId)).toEqual([['debit', 1, price], ['credit', 1, price]]);
    // This test's stale BillingFailed, refused once by each (the stack, and its counters, serve every test here).
    expect(await ignoredCount(stack, 'label-svc', 'BillingFailed', 'ALREADY_BILLED')).toBe(refusedBefore.label + 1);
    expect(await ignoredCount(stack, 'qa-svc', 'BillingFailed', 'ALREADY_BILLED')).toBe(refusedBefore.qa + 1);
    await expectNoDeadLetters();
    await expectAuditClean(stack, brokers);
  });

  it('stale events of a superseded attempt move no service backwards, and the new attempt is billed exactly once', async () => {
    const budget = 1_000;
    const price = 150;
    const projectId = await createProject(stack, budget, price);
    const taskId = await createTask(stack, projectId);
    await claim(stack, taskId, 'ann-d1');
    await submitLabels(stack, taskId, 'ann-d1');
    await decide(stack, taskId, { decision: 'reject', reason: 'the box misses the tail' });
    await eventually(async () => expect(await taskView(stack, taskId)).toMatchObject({ status: 'open', attempt: 2 }));
    // Every service has learnt the reopening before the stale events arrive.
    await eventually(async () => {
      expect((await rows<{ latest_attempt: number }>(stack, 'billing-svc', 'SELECT latest_attempt FROM billing_tasks WHERE task_id = $1', [taskId]))[0]?.latest_attempt).toBe(2);
      expect((await rows<{ reopened_attempt: number }>(stack, 'qa-svc', 'SELECT reopened_attempt FROM review_tasks WHERE task_id = $1', [taskId]))[0]?.reopened_attempt).toBe(2);
      expect((await rows<{ attempt: number }>(stack, 'label-svc', 'SELECT attempt FROM assignments WHERE task_id = $1', [taskId]))[0]?.attempt).toBe(2);
    });
    await stack.quiesce();
    expect(await labelsOf(stack, taskId)).toEqual([[1, 'rejected', null]]);
    expect(await reviewsOf(stack, taskId)).toEqual([[1, 'rejected']]);

    const attempt1 = { taskId, projectId, attempt: 1 };
    await produceEvent(stack, brokers, envelope('LabelSubmitted', 'label-svc', attempt1, { annotatorId: 'ann-d1', annotations: [{ label: 'cat', confidence: 0.99 }] }));
    const supersededBefore = await ignoredCount(stack, 'billing-svc', 'QaPassed', 'ATTEMPT_SUPERSEDED');
    await produceEvent(stack, brokers, envelope('QaPassed', 'qa-svc', attempt1, { annotatorId: 'ann-d1', reviewerId: 'reviewer-1' }));
    await eventually(async () => expect(await consumed(stack, 'billing-svc', taskId, 'QaPassed', 1)).toBe(true));
    await eventually(async () => expect(await ignoredCount(stack, 'billing-svc', 'QaPassed', 'ATTEMPT_SUPERSEDED')).toBe(supersededBefore + 1));
    await produceEvent(stack, brokers, envelope('BillingCompleted', 'billing-svc', attempt1, { annotatorId: 'ann-d1', amount: price }));
    await eventually(async () => expect(await consumed(stack, 'task-svc', taskId, 'BillingCompleted', 1)).toBe(true));
    await stack.quiesce();

    expect(await taskView(stack, taskId)).toMatchObject({ status: 'open', attempt: 2, assignee: null });
    expect(await reviewsOf(stack, taskId)).toEqual([[1, 'rejected']]);
    expect(await labelsOf(stack, taskId), 'the labels of the rejected attempt stay rejected').toEqual([[1, 'rejected', null]]);
    expect(await outboxOf(stack, 'qa-svc', taskId)).toEqual([['QaStarted', 1], ['QaRejected', 1]]);
    expect(await outboxOf(stack, 'billing-svc', taskId)).toEqual([]);
    expect(await outboxOf(stack, 'task-svc', taskId)).toEqual([['TaskCreated', 1], ['TaskAssigned', 1], ['TaskReopened', 2]]);
    expect(await ledgerOf(stack, taskId)).toEqual([]);
    expect(await balanceOf(stack, projectId)).toBe(budget);
    await expectAuditClean(stack, brokers);

    // Attempt 2 runs normally, by another annotator, and is the one paid for.
    await claim(stack, taskId, 'ann-d2');
    await submitLabels(stack, taskId, 'ann-d2', { annotatorId: 'ann-d2', attempt: 2, annotations: [{ label: 'cat', confidence: 0.95 }] });
    await decide(stack, taskId, { decision: 'approve', attempt: 2 });
    await waitForStatus(stack, taskId, 'completed');
    await stack.quiesce();

    expect(await taskView(stack, taskId)).toMatchObject({ status: 'completed', attempt: 2, assignee: 'ann-d2' });
    expect(await reviewsOf(stack, taskId)).toEqual([[1, 'rejected'], [2, 'passed']]);
    expect(await labelsOf(stack, taskId), 'only the labels of the paid attempt are accepted').toEqual([[1, 'rejected', null], [2, 'accepted', null]]);
    expect(await ledgerOf(stack, taskId)).toEqual([['debit', 2, price], ['credit', 2, price]]);
    expect((await outboxOf(stack, 'billing-svc', taskId)).filter(([type]) => type === 'BillingCompleted')).toEqual([['BillingCompleted', 2]]);
    expect(await balanceOf(stack, projectId)).toBe(budget - price);
    await expectNoDeadLetters();
    await expectAuditClean(stack, brokers);
  });

  it('lets exactly one of twenty concurrent claims on an open task win, and announces one assignment', async () => {
    const projectId = await createProject(stack, 1_000, 100);
    const taskId = await createTask(stack, projectId);
    const annotators = Array.from({ length: 20 }, (_, i) => `ann-e${i}`);
    const answers = await Promise.all(
      annotators.map(async (annotatorId) => {
        const res = await stack.http('task-svc', as.annotator(annotatorId, projectId)).post<{ assignee?: string; error?: { code: string } }>(`/tasks/${taskId}/claim`, { annotatorId });
        return { annotatorId, status: res.status, code: res.body.error?.code, assignee: res.body.assignee };
      }),
    );
    const won = answers.filter((a) => a.status === 200);
    expect(won, JSON.stringify(answers)).toHaveLength(1);
    const winner = won[0]!.annotatorId;
    expect(won[0]!.assignee).toBe(winner);
    const lost = answers.filter((a) => a.status !== 200);
    expect(lost.map((a) => a.status)).toEqual(Array.from({ length: 19 }, () => 409));
    // A claim that lost the compare-and-set is decided again on the winner's state, so every loser
    // learns that the task is taken rather than being told to retry.
    expect(lost.map((a) => a.code)).toEqual(Array.from({ length: 19 }, () => 'TASK_NOT_CLAIMABLE'));

    expect(await taskView(stack, taskId)).toMatchObject({ status: 'assigned', attempt: 1, assignee: winner });
    const assigned = await rows<{ annotator_id: string }>(stack, 'task-svc', `SELECT payload->'payload'->>'annotatorId' AS annotator_id FROM outbox WHERE message_key = $1 AND event_type = 'TaskAssigned'`, [taskId]);
    expect(assigned.map((r) => r.annotator_id)).toEqual([winner]);
    await eventually(async () => expect((await rows<{ annotator_id: string }>(stack, 'label-svc', 'SELECT annotator_id FROM assignments WHERE task_id = $1', [taskId]))[0]?.annotator_id).toBe(winner));
    await expectAuditClean(stack, brokers);
  });
});

/** The reviewer's decision over HTTP, sent again only while qa-svc has not opened the review (404 REVIEW_NOT_FOUND). */
async function decide(stack: TestStack, taskId: string, body: { decision: 'approve' | 'reject'; reason?: string; attempt?: number }): Promise<void> {
  await review(stack, taskId, body.decision, body.reason, body.attempt);
}
