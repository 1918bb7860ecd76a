import { describe, expect, it } from 'vitest';
import type { AnnotatorId, BillingCompleted, BillingFailed, LabelSubmitted, QaTimedOut, ProjectId, QaPassed, QaRejected, QaStarted, ReviewerId, TaskAssigned, TaskCompleted, TaskCreated, TaskId, TaskReopened } from '@labelflow/contracts';
import type { EventDraft } from '@labelflow/service-kit';
import { deciderSpec } from '@labelflow/testing';
import { decide, type TaskCommand, type TaskDecision } from './decide';
import { evolve, type ObservedEvent, type TaskState, type TaskStateEvent } from './state';

const taskId = '11111111-1111-4111-8111-111111111111' as TaskId;
const projectId = '22222222-2222-4222-8222-222222222222' as ProjectId;
const alice = 'alice' as AnnotatorId;
const bob = 'bob' as AnnotatorId;
const reviewer = 'rev-1' as ReviewerId;

const envelope = (attempt: number) => ({ version: 1 as const, taskId, projectId, attempt });
const taskCreated = (): EventDraft<TaskCreated> => ({ ...envelope(1), type: 'TaskCreated', payload: { title: 'Cats', dataUri: 's3://bucket/cat.png' } });
const taskAssigned = (annotatorId: AnnotatorId = alice, attempt = 1): EventDraft<TaskAssigned> => ({ ...envelope(attempt), type: 'TaskAssigned', payload: { annotatorId, leaseExpiresAt: '2026-01-01T00:01:00.000Z' } });
const labelSubmitted = (attempt = 1, annotatorId: AnnotatorId = alice): EventDraft<LabelSubmitted> => ({
  ...envelope(attempt),
  version: 2,
  type: 'LabelSubmitted',
  payload: { annotatorId, annotations: [{ label: 'cat' }], durationMs: null },
});
const qaStarted = (attempt = 1, annotatorId: AnnotatorId = alice): EventDraft<QaStarted> => ({ ...envelope(attempt), type: 'QaStarted', payload: { annotatorId } });
const qaPassed = (attempt = 1, annotatorId: AnnotatorId = alice): EventDraft<QaPassed> => ({ ...envelope(attempt), type: 'QaPassed', payload: { annotatorId, reviewerId: reviewer } });
const qaRejected = (attempt = 1, annotatorId: AnnotatorId = alice): EventDraft<QaRejected> => ({
  ...envelope(attempt),
  type: 'QaRejected',
  payload: { annotatorId, reviewerId: reviewer, reason: 'that is a dog' },
});
const billingCompleted = (attempt = 1, annotatorId: AnnotatorId = alice): EventDraft<BillingCompleted> => ({
  ...envelope(attempt),
  type: 'BillingCompleted',
  payload: { annotatorId, amount: 500 },
});
const taskReopened = (attempt: number, previousAnnotatorId: AnnotatorId | null = alice, reason: TaskReopened['payload']['reason'] = 'QA_REJECTED'): EventDraft<TaskReopened> => ({
  ...envelope(attempt),
  type: 'TaskReopened',
  payload: { reason, previousAttempt: attempt - 1, previousAnnotatorId },
});
const taskCompleted = (attempt = 1, annotatorId: AnnotatorId = alice): EventDraft<TaskCompleted> => ({ ...envelope(attempt), type: 'TaskCompleted', payload: { annotatorId } });

/** A task that does not exist yet is null; an observed event is folded in before the decided ones. */
const { given, givenFrom, when, rejectionCode } = deciderSpec({ decide, evolve }, { initial: () => null, observed: (c) => (c.type === 'Observe' ? [c.event] : []) });
const observe = (event: ObservedEvent): TaskCommand => ({ type: 'Observe', event });
const now = new Date('2026-01-01T00:00:00.000Z');
const claim = (annotatorId: AnnotatorId, readsOthersWork = false): TaskCommand => ({ type: 'ClaimTask', taskId, annotatorId, now, leaseMs: 60_000, readsOthersWork });

describe('task-svc: creating a task', () => {
  it('emits TaskCreated for attempt 1 when the task does not exist yet', () => {
    const decision = decide({ type: 'CreateTask', taskId, projectId, title: 'Cats', dataUri: 's3://bucket/cat.png' }, null);

    expect(decision).toEqual({ ok: true, events: [taskCreated()] });
  });

  it('rejects creating a task that already exists with TASK_EXISTS', () => {
    const decision = decide({ type: 'CreateTask', taskId, projectId, title: 'Cats', dataUri: 's3://bucket/cat.png' }, given(taskCreated()));

    expect(rejectionCode(decision)).toBe('TASK_EXISTS');
  });
});

describe('task-svc: claiming a task', () => {
  it('assigns an open task to the annotator who claims it', () => {
    const decision = decide(claim(alice), given(taskCreated()));

    expect(decision).toEqual({ ok: true, events: [taskAssigned(alice)] });
  });

  it('refuses a claim under the machine form, which label-svc would refuse to take labels from, with MACHINE_ACTOR_RESERVED', () => {
    const decision = decide(claim('model.cats@1' as AnnotatorId), given(taskCreated()));

    expect(decision).toMatchObject({ ok: false, reason: { code: 'MACHINE_ACTOR_RESERVED' } });
  });

  it('refuses the reviewer who rejected an earlier attempt the claim of the rework, with FORMER_REVIEWER', () => {
    const reopenedAfterRejection = given(taskCreated(), taskAssigned(alice), labelSubmitted(), qaStarted(), qaRejected(), taskReopened(2));
    const decision = decide(claim(reviewer as string as AnnotatorId), reopenedAfterRejection);

    expect(decision).toMatchObject({ ok: false, reason: { code: 'FORMER_REVIEWER' } });
    expect(decide(claim(bob), reopenedAfterRejection)).toEqual({ ok: true, events: [taskAssigned(bob, 2)] });
  });

  it('refuses the rework to whoever may read the labels of an earlier attempt (a reviewer who let the review time out, a manager), with MAY_READ_EARLIER_WORK', () => {
    const reopenedAfterTimeout = given(taskCreated(), taskAssigned(alice), labelSubmitted(), qaStarted(), taskReopened(2, alice, 'QA_TIMED_OUT'));
    const readerClaims = claim(bob, true);

    expect(decide(readerClaims, reopenedAfterTimeout)).toMatchObject({ ok: false, reason: { code: 'MAY_READ_EARLIER_WORK' } });
    expect(decide(claim(bob), reopenedAfterTimeout)).toEqual({ ok: true, events: [taskAssigned(bob, 2)] });
    // The reopen alone tells of labelled work when its LabelSubmitted has not reached task-svc.
    const verdictFirst = given(taskCreated(), taskAssigned(alice), taskReopened(2, alice, 'QA_TIMED_OUT'));
    expect(decide(readerClaims, verdictFirst)).toMatchObject({ ok: false, reason: { code: 'MAY_READ_EARLIER_WORK' } });
    expect(decide(readerClaims, given(taskCreated(), taskAssigned(alice), taskReopened(2, alice, 'QA_REJECTED')))).toMatchObject({ ok: false, reason: { code: 'MAY_READ_EARLIER_WORK' } });
  });

  it('lets a reviewer-annotator claim a first attempt, the rework of an attempt whose lease expired unlabelled, and the rework of their own labels', () => {
    const readerClaims = (annotatorId: AnnotatorId) => claim(annotatorId, true);

    expect(decide(readerClaims(bob), given(taskCreated()))).toEqual({ ok: true, events: [taskAssigned(bob)] });
    const reopenedByLease = given(taskCreated(), taskAssigned(alice), taskReopened(2, alice, 'LEASE_EXPIRED'));
    expect(reopenedByLease).toMatchObject({ labelledBy: [] });
    expect(decide(readerClaims(bob), reopenedByLease)).toEqual({ ok: true, events: [taskAssigned(bob, 2)] });
    const ownWorkRejected = given(taskCreated(), taskAssigned(alice), labelSubmitted(), qaStarted(), qaRejected(), taskReopened(2));
    expect(ownWorkRejected).toMatchObject({ labelledBy: [alice] });
    expect(decide(readerClaims(alice), ownWorkRejected)).toEqual({ ok: true, events: [taskAssigned(alice, 2)] });
  });

  it('learns of labels that an expired lease overtook from their late events, so whoever could read them cannot claim the rework', () => {
    const readerClaims = claim(bob, true);
    const reopenedByLease = given(taskCreated(), taskAssigned(alice), taskReopened(2, alice, 'LEASE_EXPIRED'));
    // label-svc took alice's labels inside her lease; they reached task-svc after the sweeper's reopen.
    const { decision, state } = when(reopenedByLease, observe(labelSubmitted(1)));
    expect(decision).toEqual({ ok: true, events: [] });
    expect(state).toEqual({ ...reopenedByLease, labelledBy: [alice] });
    expect(decide(readerClaims, state!)).toMatchObject({ ok: false, reason: { code: 'MAY_READ_EARLIER_WORK' } });
    // Read again, or followed by its review's events, it tells nothing new: stale as before.
    expect(rejectionCode(decide(observe(labelSubmitted(1)), state!))).toBe('STALE_ATTEMPT');
    expect(rejectionCode(decide(observe(qaStarted(1)), state!))).toBe('STALE_ATTEMPT');
    // A review event alone tells it too; a model named there is not the holder, who is learnt elsewhere.
    expect(when(reopenedByLease, observe(qaStarted(1))).state).toMatchObject({ labelledBy: [alice] });
    expect(rejectionCode(decide(observe(qaStarted(1, 'model.cats@1' as AnnotatorId)), reopenedByLease))).toBe('STALE_ATTEMPT');
  });

  it('counts a model\'s labels as the work of whoever held the attempt', () => {
    const model = 'model.cats@1' as AnnotatorId;
    const machineLabels: EventDraft<LabelSubmitted> = { ...labelSubmitted(1, model), payload: { ...labelSubmitted(1, model).payload, heldBy: alice } };
    const state = given(taskCreated(), taskAssigned(alice), machineLabels, qaStarted(1, model), qaRejected(1, model), taskReopened(2));
    expect(state).toMatchObject({ labelledBy: [alice] });
    expect(decide(claim(alice, true), state)).toEqual({ ok: true, events: [taskAssigned(alice, 2)] });
    expect(decide(claim(bob, true), state)).toMatchObject({ ok: false, reason: { code: 'MAY_READ_EARLIER_WORK' } });
  });

  it('remembers the rejecting reviewer when QA rejects through the consumer, and one whose rejection of an earlier attempt comes late, but none of a later attempt', () => {
    const rejected = given(taskCreated(), taskAssigned(alice), labelSubmitted(), qaStarted());
    const decision = when(rejected, observe(qaRejected()));

    expect(decision.state).toMatchObject({ attempt: 2, rejectedBy: [reviewer] });
    const lateForAttempt1 = { ...qaRejected(1), payload: { ...qaRejected(1).payload, reviewerId: 'rev-2' as ReviewerId } };
    expect(evolve(decision.state, lateForAttempt1)?.rejectedBy).toEqual([reviewer, 'rev-2']);
    const aheadOfAttempt2 = { ...qaRejected(3), payload: { ...qaRejected(3).payload, reviewerId: 'rev-3' as ReviewerId } };
    expect(evolve(decision.state, aheadOfAttempt2)?.rejectedBy).toEqual([reviewer]);
  });

  it('lists nobody after an approval, which never reopens the task', () => {
    const approved = given(taskCreated(), taskAssigned(alice), labelSubmitted(), qaStarted(), qaPassed());

    expect(approved?.rejectedBy).toEqual([]);
    expect(rejectionCode(decide(claim(reviewer as string as AnnotatorId), approved))).toBe('TASK_NOT_CLAIMABLE');
  });

  it('records the assignee and moves the task to assigned when TaskAssigned is folded', () => {
    const state = given(taskCreated(), taskAssigned(alice));

    expect(state).toMatchObject({ status: 'assigned', assignee: alice, attempt: 1 });
  });

  it('accepts a repeated claim by the annotator who already holds the task without emitting anything', () => {
    const decision = decide(claim(alice), given(taskCreated(), taskAssigned(alice)));

    expect(decision).toEqual({ ok: true, events: [] });
  });

  it('refuses a repeated claim by the holder once the lease is over, rather than answering it as held', () => {
    const held = given(taskCreated(), taskAssigned(alice));
    const atExpiry = decide({ ...claim(alice), now: new Date('2026-01-01T00:01:00.000Z') } as TaskCommand, held);
    expect(atExpiry).toEqual({ ok: false, reason: { code: 'TASK_NOT_CLAIMABLE', message: 'your lease on attempt 1 expired at 2026-01-01T00:01:00.000Z; the task reopens for a new claim once its grace has passed' } });
    expect(decide({ ...claim(alice), now: new Date('2026-01-01T00:00:59.999Z') } as TaskCommand, held)).toEqual({ ok: true, events: [] });
  });

  it('rejects a claim on a task another annotator already holds', () => {
    const decision = decide(claim(bob), given(taskCreated(), taskAssigned(alice)));

    expect(rejectionCode(decision)).toBe('TASK_NOT_CLAIMABLE');
  });

  it('rejects a claim by the former assignee once the task has moved past assigned', () => {
    const decision = decide(claim(alice), given(taskCreated(), taskAssigned(alice), labelSubmitted()));

    expect(rejectionCode(decision)).toBe('TASK_NOT_CLAIMABLE');
  });

  it('rejects a claim on a task that does not exist with TASK_NOT_FOUND', () => {
    const decision = decide(claim(alice), null);

    expect(rejectionCode(decision)).toBe('TASK_NOT_FOUND');
  });
});

describe('task-svc: observing the saga', () => {
  it.each([
    ['LabelSubmitted', labelSubmitted(), 'labelled'],
    ['QaStarted', qaStarted(), 'in_review'],
    ['QaPassed', qaPassed(), 'approved'],
  ] as const)('accepts %s silently and moves the task to %s', (_type, event, status) => {
    const { decision, state } = when(given(taskCreated(), taskAssigned(alice)), observe(event));

    expect(decision).toEqual({ ok: true, events: [] });
    expect(state?.status).toBe(status);
  });

  it('keeps an approved task approved when a late LabelSubmitted arrives after QaPassed', () => {
    const { decision, state } = when(given(taskCreated(), taskAssigned(alice), qaPassed()), observe(labelSubmitted()));

    expect(decision).toEqual({ ok: true, events: [] });
    expect(state?.status).toBe('approved');
  });

  it('emits exactly one TaskCompleted when billing completes, crediting the billed annotator', () => {
    const state = given(taskCreated(), taskAssigned(alice), labelSubmitted(), qaStarted(), qaPassed());

    const decision = decide(observe(billingCompleted()), state);

    expect(decision).toEqual({ ok: true, events: [{ ...envelope(1), type: 'TaskCompleted', payload: { annotatorId: alice } }] });
  });

  it('emits nothing for a second BillingCompleted once the task is completed', () => {
    const completed = when(given(taskCreated(), taskAssigned(alice), qaPassed()), observe(billingCompleted())).state;

    const decision = decide(observe(billingCompleted()), completed);

    expect(completed?.status).toBe('completed');
    expect(decision).toEqual({ ok: true, events: [] });
  });

  it('rejects an observed event for another attempt with STALE_ATTEMPT', () => {
    const decision = decide(observe(labelSubmitted(2)), given(taskCreated(), taskAssigned(alice)));

    expect(rejectionCode(decision)).toBe('STALE_ATTEMPT');
  });

  it('rejects a BillingCompleted for another attempt with STALE_ATTEMPT instead of completing the task', () => {
    const decision = decide(observe(billingCompleted(2)), given(taskCreated(), taskAssigned(alice), qaPassed()));

    expect(rejectionCode(decision)).toBe('STALE_ATTEMPT');
  });

  it('rejects an observed event for an unknown task with TASK_NOT_FOUND', () => {
    const decision = decide(observe(qaStarted()), null);

    expect(rejectionCode(decision)).toBe('TASK_NOT_FOUND');
  });
});

describe('task-svc: reopening a task that QA rejected', () => {
  it('emits TaskReopened for the next attempt, naming the rejected attempt and its annotator, when QA rejects the current attempt', () => {
    const state = given(taskCreated(), taskAssigned(alice), labelSubmitted(), qaStarted());

    const decision = decide(observe(qaRejected(1)), state);

    expect(decision).toEqual({ ok: true, events: [taskReopened(2, alice)] });
  });

  it('reopens even when QaRejected overtakes LabelSubmitted and QaStarted, since they travel on other topics', () => {
    const state = given(taskCreated(), taskAssigned(alice));

    const decision = decide(observe(qaRejected(1)), state);

    expect(decision).toEqual({ ok: true, events: [taskReopened(2, alice)] });
  });

  it('moves the task back to open, unassigned, on the new attempt when the rejection and TaskReopened are folded', () => {
    const { state } = when(given(taskCreated(), taskAssigned(alice), labelSubmitted(), qaStarted()), observe(qaRejected(1)));

    expect(state).toMatchObject({ status: 'open', attempt: 2, assignee: null });
  });

  it('rejects a QaRejected for an older attempt with STALE_ATTEMPT instead of reopening the task', () => {
    const state = given(taskCreated(), taskAssigned(alice), qaRejected(1), taskReopened(2), taskAssigned(bob, 2), labelSubmitted(2, bob));

    const decision = decide(observe(qaRejected(1)), state);

    expect(rejectionCode(decision)).toBe('STALE_ATTEMPT');
  });

  it('emits nothing for a second QaRejected of the same attempt once the task was reopened', () => {
    const reopened = when(given(taskCreated(), taskAssigned(alice), labelSubmitted(), qaStarted()), observe(qaRejected(1))).state;

    const second = when(reopened, observe(qaRejected(1)));

    expect(second.rejection).toBe('STALE_ATTEMPT');
    expect(second.state).toEqual(reopened);
    expect(givenFrom(reopened, qaRejected(1))).toEqual(reopened);
  });

  it('rejects a QaRejected that contradicts an approval with TASK_NOT_REOPENABLE, so a paid task is never billed again', () => {
    const state = given(taskCreated(), taskAssigned(alice), qaPassed(), billingCompleted(), taskCompleted());

    expect(rejectionCode(decide(observe(qaRejected(1)), state))).toBe('TASK_NOT_REOPENABLE');
  });

  it('ignores a replayed TaskReopened once the new attempt has been claimed', () => {
    const state = given(taskCreated(), taskAssigned(alice), taskReopened(2), taskAssigned(bob, 2));

    expect(evolve(state, taskReopened(2))).toBe(state);
  });

  it('remembers a reviewer whose rejection arrives after an expired lease reopened the attempt, moving nothing else, so they cannot claim the rework', () => {
    const reopenedByLease = given(taskCreated(), taskAssigned(alice), labelSubmitted(), qaStarted(), taskReopened(2));
    const { decision, state } = when(reopenedByLease, observe(qaRejected(1)));
    expect(decision).toEqual({ ok: true, events: [] });
    expect(state).toEqual({ ...reopenedByLease, rejectedBy: [reviewer] });
    expect(decide(claim(reviewer as string as AnnotatorId), state!)).toMatchObject({ ok: false, reason: { code: 'FORMER_REVIEWER' } });
    // Read again, it is stale as before.
    expect(rejectionCode(decide(observe(qaRejected(1)), state!))).toBe('STALE_ATTEMPT');
  });

  it('keeps the reopened task open when late events of the rejected attempt are folded', () => {
    const state = given(taskCreated(), taskAssigned(alice), qaRejected(1), taskReopened(2));

    expect(given(taskCreated(), taskAssigned(alice), qaRejected(1), taskReopened(2), labelSubmitted(1), qaStarted(1))).toEqual(state);
  });

  it.each([
    ['another annotator', bob],
    ['the annotator whose labels were rejected', alice],
  ] as const)('assigns attempt 2 to %s who claims the reopened task', (_who, annotatorId) => {
    const state = given(taskCreated(), taskAssigned(alice), labelSubmitted(), qaStarted(), qaRejected(1), taskReopened(2));

    const decision = decide(claim(annotatorId), state);

    expect(decision).toEqual({ ok: true, events: [taskAssigned(annotatorId, 2)] });
  });

  it('walks the whole rework loop from creation to completion, one attempt after the other', () => {
    const steps: [TaskStateEvent, string, number, AnnotatorId | null][] = [
      [taskCreated(), 'open', 1, null],
      [taskAssigned(alice, 1), 'assigned', 1, alice],
      [labelSubmitted(1), 'labelled', 1, alice],
      [qaStarted(1), 'in_review', 1, alice],
      [qaRejected(1), 'in_review', 1, alice],
      [taskReopened(2, alice), 'open', 2, null],
      [taskAssigned(bob, 2), 'assigned', 2, bob],
      [labelSubmitted(2, bob), 'labelled', 2, bob],
      [qaStarted(2, bob), 'in_review', 2, bob],
      [qaPassed(2, bob), 'approved', 2, bob],
      [billingCompleted(2, bob), 'completed', 2, bob],
      [taskCompleted(2, bob), 'completed', 2, bob],
    ];

    let state: TaskState | null = null;
    const seen = steps.map(([event]) => {
      state = evolve(state, event);
      return [state?.status, state?.attempt, state?.assignee];
    });

    expect(seen).toEqual(steps.map(([, status, attempt, assignee]) => [status, attempt, assignee]));
  });

  it('completes attempt 2 with the billed annotator of attempt 2 when its BillingCompleted arrives', () => {
    const state = given(taskCreated(), taskAssigned(alice), qaRejected(1), taskReopened(2), taskAssigned(bob, 2), labelSubmitted(2, bob), qaStarted(2, bob), qaPassed(2, bob));

    const decision = decide(observe(billingCompleted(2, bob)), state);

    expect(decision).toEqual({ ok: true, events: [taskCompleted(2, bob)] });
  });

  it('rejects a BillingCompleted for the rejected attempt with STALE_ATTEMPT', () => {
    const state = given(taskCreated(), taskAssigned(alice), qaRejected(1), taskReopened(2), taskAssigned(bob, 2));

    expect(rejectionCode(decide(observe(billingCompleted(1)), state))).toBe('STALE_ATTEMPT');
  });
});

const qaTimedOut = (attempt = 1, annotatorId: AnnotatorId = alice): EventDraft<QaTimedOut> => ({ ...envelope(attempt), type: 'QaTimedOut', payload: { annotatorId, deadlineAt: '2026-01-04T00:00:00.000Z' } });
const billingFailed = (attempt = 1, annotatorId: AnnotatorId = alice): EventDraft<BillingFailed> => ({
  ...envelope(attempt),
  type: 'BillingFailed',
  payload: { annotatorId, reason: 'INSUFFICIENT_BUDGET', detail: 'balance 100 < price 250' },
});
const expireAt = (iso: string, graceMs = 0): TaskCommand => ({ type: 'ExpireLease', taskId, now: new Date(iso), graceMs });
const cancel = (): TaskCommand => ({ type: 'CancelTask', taskId, reason: 'customer withdrew the sample', cancelledBy: 'admin-1' });
const eventTypes = (decision: TaskDecision) => (decision.ok ? decision.events.map((e) => e.type) : []);

describe('task-svc: the assignment lease', () => {
  it('stamps the lease end on the assignment from the claim time and the lease length', () => {
    const decision = decide(claim(alice), given(taskCreated()));
    expect(decision.ok && decision.events[0]?.type === 'TaskAssigned' && decision.events[0].payload.leaseExpiresAt).toBe('2026-01-01T00:01:00.000Z');
  });

  it('reopens an assigned task as the next attempt once its lease and the grace have passed', () => {
    const decision = decide(expireAt('2026-01-01T00:01:30.000Z', 30_000), given(taskCreated(), taskAssigned(alice)));
    expect(decision).toEqual({ ok: true, events: [{ ...envelope(2), type: 'TaskReopened', payload: { reason: 'LEASE_EXPIRED', previousAttempt: 1, previousAnnotatorId: alice } }] });
  });

  it('does not reopen before the grace has passed, so labels submitted at the last moment still count', () => {
    expect(rejectionCode(decide(expireAt('2026-01-01T00:01:10.000Z', 30_000), given(taskCreated(), taskAssigned(alice))))).toBe('LEASE_NOT_DUE');
  });

  it('does not reopen a task whose labels already arrived, however late the sweep runs', () => {
    expect(rejectionCode(decide(expireAt('2026-02-01T00:00:00.000Z'), given(taskCreated(), taskAssigned(alice), labelSubmitted())))).toBe('LEASE_NOT_DUE');
  });
});

describe('task-svc: compensations', () => {
  it('reopens the task as the next attempt when the QA deadline of the current attempt passed', () => {
    const decision = decide(observe(qaTimedOut()), given(taskCreated(), taskAssigned(alice), labelSubmitted(), qaStarted()));
    expect(decision).toEqual({ ok: true, events: [{ ...envelope(2), type: 'TaskReopened', payload: { reason: 'QA_TIMED_OUT', previousAttempt: 1, previousAnnotatorId: alice } }] });
  });

  it('marks the task failed with the billing reason when billing fails for the current attempt', () => {
    const state = given(taskCreated(), taskAssigned(alice), labelSubmitted(), qaStarted(), qaPassed());
    const decision = decide(observe(billingFailed()), state);
    expect(decision).toEqual({ ok: true, events: [{ ...envelope(1), type: 'TaskFailed', payload: { reason: 'BILLING_FAILED', detail: 'INSUFFICIENT_BUDGET: balance 100 < price 250' } }] });
    expect(when(state, observe(billingFailed())).state).toMatchObject({ status: 'failed', reason: 'INSUFFICIENT_BUDGET: balance 100 < price 250' });
  });

  it('completes a failed task when a retried billing succeeds after a top-up', () => {
    const failed = given(taskCreated(), taskAssigned(alice), labelSubmitted(), qaPassed(), billingFailed(), { ...envelope(1), type: 'TaskFailed', payload: { reason: 'BILLING_FAILED', detail: 'x' } });
    const decision = decide(observe(billingCompleted()), failed);
    expect(eventTypes(decision)).toEqual(['TaskCompleted']);
    expect(when(failed, observe(billingCompleted())).state).toMatchObject({ status: 'completed', reason: null });
  });

  it('cancels a task at any stage and remembers the stage it was in', () => {
    for (const state of [given(taskCreated()), given(taskCreated(), taskAssigned(alice), labelSubmitted(), qaPassed()), given(taskCreated(), taskAssigned(alice), qaPassed(), billingCompleted(), taskCompleted())]) {
      const decision = decide(cancel(), state);
      expect(decision.ok && decision.events[0]?.type === 'TaskCancelled' && decision.events[0].payload.previousStatus).toBe(state?.status);
    }
  });

  it('treats a second cancellation as a no-op, so a retried admin request cannot fail', () => {
    const cancelled = given(taskCreated(), { ...envelope(1), type: 'TaskCancelled', payload: { reason: 'r', cancelledBy: 'admin', previousStatus: 'open' } });
    expect(decide(cancel(), cancelled)).toEqual({ ok: true, events: [] });
  });

  it('ignores every saga event that arrives after the cancellation, so nothing revives the task', () => {
    const cancelled = given(taskCreated(), taskAssigned(alice), { ...envelope(1), type: 'TaskCancelled', payload: { reason: 'r', cancelledBy: 'admin', previousStatus: 'assigned' } });
    for (const event of [labelSubmitted(), qaPassed(), billingCompleted(), qaRejected(), qaTimedOut(), billingFailed()]) {
      expect(rejectionCode(decide(observe(event), cancelled))).toBe('TASK_CANCELLED');
    }
    expect(evolve(cancelled, { ...envelope(2), type: 'TaskReopened', payload: { reason: 'LEASE_EXPIRED', previousAttempt: 1, previousAnnotatorId: alice } })).toBe(cancelled);
  });
});
