import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { eventually, queryRows, startStack, type TestStack } from '@labelflow/testing';
import { expectAuditClean } from './audit';
import { claim, createProject, createTask, review, submitLabels, waitForStatus } from './saga';

describe('the annotation saga when QA rejects the first attempt', () => {
  let stack: TestStack;
  beforeAll(async () => {
    stack = await startStack(inject('infra'));
  });
  afterAll(async () => stack?.stop());

  it('reopens the task, lets another annotator rework it and bills only the approved attempt', async () => {
    const budget = 1_000;
    const price = 300;
    const projectId = await createProject(stack, budget, price);
    const taskId = await createTask(stack, projectId, 'is there a cat? (rework)');

    await claim(stack, taskId, 'ann-1');
    await submitLabels(stack, taskId, 'ann-1');
    await review(stack, taskId, 'reject', 'that is a dog, not a cat');

    // task-svc reopens the task for attempt 2 once it consumes QaRejected.
    await eventually(async () => {
      const task = await stack.http('task-svc').get<{ status: string; attempt: number; assignee: string | null }>(`/tasks/${taskId}`);
      expect(task.body).toMatchObject({ status: 'open', attempt: 2, assignee: null });
    });

    // label-svc saves once per batch it applies: had TaskReopened and ann-2's TaskAssigned reached
    // it in one batch, the row below would count one compare-and-set for both. The reopen lands first.
    await eventually(async () => {
      const rows = await queryRows<{ attempt: number; annotator_id: string | null; version: number }>(
        stack.databases['label-svc'],
        'SELECT attempt, annotator_id, version FROM assignments WHERE task_id = $1',
        [taskId],
      );
      expect(rows).toEqual([{ attempt: 2, annotator_id: null, version: 2 }]);
    });

    await claim(stack, taskId, 'ann-2');
    // label-svc learns the reopen and the new assignment over Kafka; naming attempt 2 makes its
    // answer a "not yet" until it has (without it, the old assignment refuses ann-2 outright).
    await submitLabels(stack, taskId, 'ann-2', { annotatorId: 'ann-2', attempt: 2, annotations: [{ label: 'cat', confidence: 0.9 }] });
    await review(stack, taskId, 'approve', undefined, 2);
    await waitForStatus(stack, taskId, 'completed');

    const task = await stack.http('task-svc').get<{ attempt: number; assignee: string }>(`/tasks/${taskId}`);
    expect(task.body).toMatchObject({ attempt: 2, assignee: 'ann-2' });

    // label-svc learns QaPassed asynchronously, after billing may already have completed the task.
    await eventually(async () => {
      const labels = await queryRows<{ attempt: number; annotator_id: string; status: string }>(
        stack.databases['label-svc'],
        'SELECT attempt, annotator_id, status FROM labels WHERE task_id = $1 ORDER BY attempt',
        [taskId],
      );
      expect(labels.map((l) => [l.attempt, l.annotator_id, l.status])).toEqual([
        [1, 'ann-1', 'rejected'],
        [2, 'ann-2', 'accepted'],
      ]);
    });

    // Assigned (v1), cleared by TaskReopened (v2), assigned to ann-2 (v3): each step a compare-and-set.
    const assignments = await queryRows<{ attempt: number; annotator_id: string; version: number }>(
      stack.databases['label-svc'],
      'SELECT attempt, annotator_id, version FROM assignments WHERE task_id = $1',
      [taskId],
    );
    expect(assignments).toEqual([{ attempt: 2, annotator_id: 'ann-2', version: 3 }]);

    const reviews = await queryRows<{ attempt: number; annotator_id: string; status: string; reason: string | null }>(
      stack.databases['qa-svc'],
      'SELECT attempt, annotator_id, status, reason FROM reviews WHERE task_id = $1 ORDER BY attempt',
      [taskId],
    );
    expect(reviews.map((r) => [r.attempt, r.annotator_id, r.status, r.reason])).toEqual([
      [1, 'ann-1', 'rejected', 'that is a dog, not a cat'],
      [2, 'ann-2', 'passed', null],
    ]);

    // The inbox key includes the attempt: the second LabelSubmitted was processed, not swallowed as a duplicate.
    const inbox = await queryRows<{ attempt: number }>(
      stack.databases['qa-svc'],
      `SELECT attempt FROM inbox WHERE task_id = $1 AND event_type = 'LabelSubmitted' ORDER BY attempt`,
      [taskId],
    );
    expect(inbox.map((r) => r.attempt)).toEqual([1, 2]);

    const ledger = await queryRows<{ kind: string; attempt: number; annotator_id: string | null; amount: string }>(
      stack.databases['billing-svc'],
      'SELECT kind, attempt, annotator_id, amount FROM ledger WHERE task_id = $1 ORDER BY kind',
      [taskId],
    );
    expect(ledger.map((e) => [e.kind, e.attempt, Number(e.amount)])).toEqual([
      ['credit', 2, price],
      ['debit', 2, price],
    ]);
    expect(ledger.find((e) => e.kind === 'credit')?.annotator_id).toBe('ann-2');

    const payouts = await Promise.all(['ann-1', 'ann-2'].map((a) => stack.http('billing-svc').get<{ balances: Record<string, number> }>(`/annotators/${a}/payouts`)));
    expect(payouts.map((p) => p.body.balances.USD ?? 0)).toEqual([0, price]);
    const project = await stack.http('billing-svc').get<{ balance: number }>(`/projects/${projectId}`);
    expect(project.body.balance).toBe(budget - price);

    // Exactly one reopen: a duplicate or late QaRejected for attempt 1 must not reopen again.
    const reopened = await queryRows<{ attempt: number }>(
      stack.databases['task-svc'],
      `SELECT (payload->>'attempt')::int AS attempt FROM outbox WHERE message_key = $1 AND event_type = 'TaskReopened'`,
      [taskId],
    );
    expect(reopened.map((r) => r.attempt)).toEqual([2]);
    await expectAuditClean(stack, inject('infra').kafkaBrokers);
  });
});
