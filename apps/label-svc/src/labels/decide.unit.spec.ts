import { describe, expect, it } from 'vitest';
import type { Annotation, AnnotatorId, BillingCompleted, BillingFailed, BillingRefunded, LabelSubmitted, ProjectId, QaPassed, QaRejected, QaTimedOut, ReopenReason, ReviewerId, TaskAssigned, TaskCancelled, TaskId, TaskReopened } from '@labelflow/contracts';
import type { EventDraft } from '@labelflow/service-kit';
import { deciderSpec } from '@labelflow/testing';
import { decide, type LabelCommand } from './decide';
import { emptyState, evolve, type LabelObservedEvent, type LabelTaskState } from './state';

const taskId = '11111111-1111-4111-8111-111111111111' as TaskId;
const projectId = '22222222-2222-4222-8222-222222222222' as ProjectId;
const alice = 'alice' as AnnotatorId;
const bob = 'bob' as AnnotatorId;
const reviewer = 'rev-1' as ReviewerId;
const annotations: Annotation[] = [{ label: 'cat', confidence: 0.9 }];

const envelope = (attempt: number) => ({ version: 1 as const, taskId, projectId, attempt });
const taskAssigned = (annotatorId: AnnotatorId, attempt = 1, leaseExpiresAt?: string): EventDraft<TaskAssigned> => ({
  ...envelope(attempt),
  type: 'TaskAssigned',
  payload: leaseExpiresAt === undefined ? { annotatorId } : { annotatorId, leaseExpiresAt },
});
const labelSubmitted = (annotatorId: AnnotatorId, attempt = 1, durationMs: number | null = null): EventDraft<LabelSubmitted> => ({
  ...envelope(attempt),
  version: 2,
  type: 'LabelSubmitted',
  payload: { annotatorId, annotations, durationMs },
});
const qaPassed = (attempt = 1): EventDraft<QaPassed> => ({ ...envelope(attempt), type: 'QaPassed', payload: { annotatorId: alice, reviewerId: reviewer } });
const qaRejected = (attempt = 1): EventDraft<QaRejected> => ({ ...envelope(attempt), type: 'QaRejected', payload: { annotatorId: alice, reviewerId: reviewer, reason: 'wrong animal' } });
const taskReopened = (attempt: number, previousAnnotatorId: AnnotatorId = alice, reason: ReopenReason = 'QA_REJECTED'): EventDraft<TaskReopened> => ({
  ...envelope(attempt),
  type: 'TaskReopened',
  payload: { reason, previousAttempt: attempt - 1, previousAnnotatorId },
});
const taskCancelled = (attempt = 1): EventDraft<TaskCancelled> => ({
  ...envelope(attempt),
  type: 'TaskCancelled',
  payload: { reason: 'project closed', cancelledBy: 'admin-1', previousStatus: 'in_review' },
});
const qaTimedOut = (attempt = 1): EventDraft<QaTimedOut> => ({ ...envelope(attempt), type: 'QaTimedOut', payload: { annotatorId: alice, deadlineAt: '2030-01-04T00:00:00.000Z' } });
const billingFailed = (attempt = 1): EventDraft<BillingFailed> => ({
  ...envelope(attempt),
  type: 'BillingFailed',
  payload: { annotatorId: alice, reason: 'INSUFFICIENT_BUDGET', detail: 'budget exhausted' },
});
const billingCompleted = (attempt = 1): EventDraft<BillingCompleted> => ({ ...envelope(attempt), type: 'BillingCompleted', payload: { annotatorId: alice, amount: 500 } });
const billingRefunded = (attempt: number, reason: BillingRefunded['payload']['reason']): EventDraft<BillingRefunded> => ({
  ...envelope(attempt),
  type: 'BillingRefunded',
  payload: { annotatorId: alice, amount: 500, reason },
});
const t0 = new Date('2030-01-01T00:00:00.000Z');
const lease = '2030-01-01T01:00:00.000Z';

/** A task label-svc never heard of is empty; an observed event is folded in before the decided ones. */
const { given, givenFrom, when, rejectionCode } = deciderSpec({ decide, evolve }, { initial: () => emptyState(taskId), observed: (c) => (c.type === 'Observe' ? [c.event] : []) });
const submit = (annotatorId: AnnotatorId, now: Date = t0, durationMs?: number): LabelCommand => ({ type: 'SubmitLabels', taskId, annotatorId, annotations, now, ...(durationMs === undefined ? {} : { durationMs }) });
const observe = (event: LabelObservedEvent): LabelCommand => ({ type: 'Observe', event });
/** When: the event is observed as the consumer does (decide, then fold the event if accepted). */
const whenObserved = (state: LabelTaskState, event: LabelObservedEvent) => when(state, observe(event));
const statuses = (state: LabelTaskState) => state.labels.map((l) => [l.attempt, l.status, l.voidReason]);

describe('label-svc: submitting labels', () => {
  it('rejects a submission for a task whose assignment has not been received with ASSIGNMENT_UNKNOWN', () => {
    expect(rejectionCode(decide(submit(alice), given()))).toBe('ASSIGNMENT_UNKNOWN');
  });

  it('rejects a submission by someone other than the assignee with NOT_ASSIGNEE', () => {
    expect(rejectionCode(decide(submit(bob), given(taskAssigned(alice))))).toBe('NOT_ASSIGNEE');
  });

  it("emits LabelSubmitted with the assignment's attempt and projectId when the assignee submits", () => {
    const decision = decide(submit(alice), given(taskAssigned(alice)));

    expect(decision).toEqual({ ok: true, events: [labelSubmitted(alice, 1)] });
  });

  it('writes the newest LabelSubmitted, carrying how long the annotator worked when the tool said so', () => {
    const decision = decide(submit(alice, t0, 42_000), given(taskAssigned(alice)));

    expect(decision).toEqual({ ok: true, events: [labelSubmitted(alice, 1, 42_000)] });
  });

  it('rejects a second submission for the same attempt with ALREADY_SUBMITTED', () => {
    expect(rejectionCode(decide(submit(alice), given(taskAssigned(alice), labelSubmitted(alice))))).toBe('ALREADY_SUBMITTED');
  });

  it('lets the same annotator submit again for attempt 2 after a rework assignment', () => {
    const decision = decide(submit(alice), given(taskAssigned(alice), labelSubmitted(alice), qaRejected(1), taskAssigned(alice, 2)));

    expect(decision).toEqual({ ok: true, events: [labelSubmitted(alice, 2)] });
  });

  it('lets a newly assigned annotator submit for attempt 2 and no longer lets the first one', () => {
    const state = given(taskAssigned(alice), labelSubmitted(alice), qaRejected(1), taskAssigned(bob, 2));

    expect(decide(submit(bob), state)).toEqual({ ok: true, events: [labelSubmitted(bob, 2)] });
    expect(rejectionCode(decide(submit(alice), state))).toBe('NOT_ASSIGNEE');
  });
});

describe('label-svc: observing assignments and reviews', () => {
  it('accepts a newer TaskAssigned and folds it into the current assignment', () => {
    const { decision, state } = whenObserved(given(taskAssigned(alice)), taskAssigned(bob, 2));

    expect(decision).toEqual({ ok: true, events: [] });
    expect(state.assignment).toEqual({ projectId, attempt: 2, annotatorId: bob, leaseExpiresAt: null, version: 0 });
  });

  it('rejects a late TaskAssigned for attempt 1 after attempt 2 with STALE_ATTEMPT', () => {
    const decision = decide(observe(taskAssigned(bob, 1)), given(taskAssigned(alice), taskAssigned(alice, 2)));

    expect(rejectionCode(decision)).toBe('STALE_ATTEMPT');
  });

  it('leaves the state untouched when the same TaskAssigned is delivered twice', () => {
    const state = given(taskAssigned(alice));

    expect(evolve(state, taskAssigned(alice))).toBe(state);
  });

  it("marks the attempt's labels accepted when QaPassed is observed", () => {
    const { decision, state } = whenObserved(given(taskAssigned(alice), labelSubmitted(alice)), qaPassed());

    expect(decision).toEqual({ ok: true, events: [] });
    expect(state.labels).toEqual([{ attempt: 1, annotatorId: alice, annotations, status: 'accepted', voidReason: null, billed: false }]);
  });

  it("marks only the reviewed attempt's labels rejected when QaRejected is observed", () => {
    const state = given(taskAssigned(alice), labelSubmitted(alice), qaRejected(1), taskAssigned(alice, 2), labelSubmitted(alice, 2));

    const next = whenObserved(state, qaRejected(2)).state;

    expect(next.labels.map((l) => [l.attempt, l.status])).toEqual([
      [1, 'rejected'],
      [2, 'rejected'],
    ]);
    expect(state.labels[1]?.status).toBe('submitted');
  });

  it('rejects a review outcome for an attempt that has no labels with LABEL_UNKNOWN', () => {
    expect(rejectionCode(decide(observe(qaPassed(1)), given(taskAssigned(alice))))).toBe('LABEL_UNKNOWN');
  });
});

describe('label-svc: a task reopened for rework', () => {
  it('accepts TaskReopened for a newer attempt and leaves the new attempt unassigned, keeping the attempt', () => {
    const { decision, state } = whenObserved(given(taskAssigned(alice), labelSubmitted(alice), qaRejected(1)), taskReopened(2));

    expect(decision).toEqual({ ok: true, events: [] });
    expect(state.assignment).toEqual({ projectId, attempt: 2, annotatorId: null, leaseExpiresAt: null, version: 0 });
  });

  it('keeps the assignment row version, so the repository can compare-and-set the cleared assignment', () => {
    const state: LabelTaskState = { ...given(taskAssigned(alice)), assignment: { projectId, attempt: 1, annotatorId: alice, leaseExpiresAt: null, version: 3 } };

    expect(evolve(state, taskReopened(2)).assignment?.version).toBe(3);
  });

  it('rejects every submission with ASSIGNMENT_UNKNOWN after the reopen until the new attempt is claimed', () => {
    const state = given(taskAssigned(alice), labelSubmitted(alice), qaRejected(1), taskReopened(2));

    expect(rejectionCode(decide(submit(alice), state))).toBe('ASSIGNMENT_UNKNOWN');
    expect(rejectionCode(decide(submit(bob), state))).toBe('ASSIGNMENT_UNKNOWN');
  });

  it('lets the annotator who claims the reopened task submit for attempt 2', () => {
    const state = given(taskAssigned(alice), labelSubmitted(alice), qaRejected(1), taskReopened(2), taskAssigned(bob, 2));

    expect(decide(submit(bob), state)).toEqual({ ok: true, events: [labelSubmitted(bob, 2)] });
    expect(rejectionCode(decide(submit(alice), state))).toBe('NOT_ASSIGNEE');
  });

  it('rejects a TaskReopened for an attempt label-svc has already reached with STALE_ATTEMPT', () => {
    const state = given(taskAssigned(alice), labelSubmitted(alice), qaRejected(1), taskReopened(2), taskAssigned(bob, 2));

    expect(rejectionCode(decide(observe(taskReopened(2)), state))).toBe('STALE_ATTEMPT');
    expect(evolve(state, taskReopened(2))).toBe(state);
  });

  it('ends the labels of the attempt a reopen ended when that reopen, dead-lettered, is replayed after the next attempt was claimed, and leaves the claim alone', () => {
    // The lease race: labels of attempt 1 accepted, task-svc reopened it, label-svc dead-lettered the reopen and read the next claim.
    const state = given(taskAssigned(alice), labelSubmitted(alice), qaPassed(1), taskAssigned(bob, 2));

    const { decision, state: next } = whenObserved(state, taskReopened(2, alice, 'LEASE_EXPIRED'));

    expect(decision).toEqual({ ok: true, events: [] });
    expect(statuses(next)).toEqual([[1, 'voided', 'SUPERSEDED']]);
    expect(next.assignment).toEqual(state.assignment);
    expect(rejectionCode(decide(observe(taskReopened(2, alice, 'LEASE_EXPIRED')), next))).toBe('STALE_ATTEMPT');
  });

  it('rejects a late TaskAssigned for the rejected attempt with STALE_ATTEMPT while the new attempt is unclaimed', () => {
    const state = given(taskAssigned(alice), labelSubmitted(alice), qaRejected(1), taskReopened(2));

    expect(rejectionCode(decide(observe(taskAssigned(alice, 1)), state))).toBe('STALE_ATTEMPT');
  });

  it('keeps attempt 1 rejected and marks attempt 2 accepted when the resubmission passes review', () => {
    const state = given(taskAssigned(alice), labelSubmitted(alice), qaRejected(1), taskReopened(2), taskAssigned(bob, 2), labelSubmitted(bob, 2));

    const next = whenObserved(state, qaPassed(2)).state;

    expect(next.labels.map((l) => [l.attempt, l.annotatorId, l.status])).toEqual([
      [1, alice, 'rejected'],
      [2, bob, 'accepted'],
    ]);
  });
});

describe('label-svc: the assignment lease', () => {
  it('stores the lease expiry of the assignment, normalised to UTC', () => {
    const state = given(taskAssigned(alice, 1, '2030-01-01T02:00:00.000+01:00'));

    expect(state.assignment?.leaseExpiresAt).toBe(lease);
  });

  it('accepts a submission made before the lease expires', () => {
    const state = given(taskAssigned(alice, 1, lease));

    expect(decide(submit(alice, new Date('2030-01-01T00:59:59.999Z')), state)).toEqual({ ok: true, events: [labelSubmitted(alice, 1)] });
  });

  it('rejects a submission made at or after the lease expiry with LEASE_EXPIRED', () => {
    const state = given(taskAssigned(alice, 1, lease));

    expect(rejectionCode(decide(submit(alice, new Date(lease)), state))).toBe('LEASE_EXPIRED');
    expect(rejectionCode(decide(submit(alice, new Date('2030-01-02T00:00:00.000Z')), state))).toBe('LEASE_EXPIRED');
  });

  it('accepts a submission at any time when the assignment has no lease', () => {
    expect(decide(submit(alice, new Date('2099-01-01T00:00:00.000Z')), given(taskAssigned(alice)))).toEqual({ ok: true, events: [labelSubmitted(alice, 1)] });
  });

  it('lets the annotator of a new attempt submit under the new lease after the old one expired', () => {
    const state = given(taskAssigned(alice, 1, lease), taskReopened(2, alice, 'LEASE_EXPIRED'), taskAssigned(bob, 2, '2030-01-01T03:00:00.000Z'));

    expect(decide(submit(bob, new Date('2030-01-01T02:00:00.000Z')), state)).toEqual({ ok: true, events: [labelSubmitted(bob, 2)] });
  });
});

describe('label-svc: a reopened task supersedes unreviewed labels', () => {
  it('voids the submitted labels of the older attempt as SUPERSEDED when the task is reopened because the lease expired', () => {
    const { decision, state } = whenObserved(given(taskAssigned(alice), labelSubmitted(alice)), taskReopened(2, alice, 'LEASE_EXPIRED'));

    expect(decision).toEqual({ ok: true, events: [] });
    expect(statuses(state)).toEqual([[1, 'voided', 'SUPERSEDED']]);
  });

  it('keeps rejected labels of the older attempt as they are when the task is reopened', () => {
    const { state } = whenObserved(given(taskAssigned(alice), labelSubmitted(alice), qaRejected(1)), taskReopened(2));

    expect(statuses(state)).toEqual([[1, 'rejected', null]]);
  });

  it('voids accepted labels of the older attempt as SUPERSEDED on the reopen, whether or not billing ever refunds them', () => {
    // Billing refuses a late approval of a superseded attempt without billing it, so no refund
    // would come to void these labels: the reopen itself must.
    const reopened = whenObserved(given(taskAssigned(alice), labelSubmitted(alice), qaPassed(1)), taskReopened(2, alice, 'LEASE_EXPIRED'));
    expect(statuses(reopened.state)).toEqual([[1, 'voided', 'SUPERSEDED']]);

    const refundedToo = whenObserved(reopened.state, billingRefunded(1, 'ATTEMPT_SUPERSEDED'));
    expect(statuses(refundedToo.state)).toEqual([[1, 'voided', 'SUPERSEDED']]);
  });

  it('ends the labels rejected whichever of QaRejected and the reopen it caused arrives first (they travel on different topics)', () => {
    const verdictFirst = given(taskAssigned(alice), labelSubmitted(alice), qaRejected(1), taskReopened(2, alice, 'QA_REJECTED'));
    const reopenFirst = given(taskAssigned(alice), labelSubmitted(alice), taskReopened(2, alice, 'QA_REJECTED'));

    expect(statuses(reopenFirst)).toEqual([[1, 'rejected', null]]);
    const late = whenObserved(reopenFirst, qaRejected(1));
    expect(late.decision).toEqual({ ok: true, events: [] });
    expect(statuses(late.state)).toEqual(statuses(verdictFirst));
    expect(statuses(verdictFirst)).toEqual([[1, 'rejected', null]]);
  });

  it('ends the labels voided as QA_TIMED_OUT whichever of QaTimedOut and the reopen it caused arrives first', () => {
    const verdictFirst = given(taskAssigned(alice), labelSubmitted(alice), qaTimedOut(1), taskReopened(2, alice, 'QA_TIMED_OUT'));
    const reopenFirst = given(taskAssigned(alice), labelSubmitted(alice), taskReopened(2, alice, 'QA_TIMED_OUT'));

    const late = whenObserved(reopenFirst, qaTimedOut(1));
    expect(rejectionCode(late.decision)).toBe('LABEL_VOIDED');
    expect(statuses(late.state)).toEqual([[1, 'voided', 'QA_TIMED_OUT']]);
    expect(statuses(verdictFirst)).toEqual([[1, 'voided', 'QA_TIMED_OUT']]);
  });

  it('voids accepted labels as SUPERSEDED even when the reopen names a rejection: a verdict never flips', () => {
    const { state } = whenObserved(given(taskAssigned(alice), labelSubmitted(alice), qaPassed(1)), taskReopened(2, alice, 'QA_REJECTED'));

    expect(statuses(state)).toEqual([[1, 'voided', 'SUPERSEDED']]);
  });

  it('voids billed labels of an attempt as SUPERSEDED when billing refunds it as superseded', () => {
    const { decision, state } = whenObserved(given(taskAssigned(alice), labelSubmitted(alice), qaPassed(1)), billingRefunded(1, 'ATTEMPT_SUPERSEDED'));

    expect(decision).toEqual({ ok: true, events: [] });
    expect(statuses(state)).toEqual([[1, 'voided', 'SUPERSEDED']]);
  });

  it('ignores a refund for a cancelled task with NOTHING_TO_UNDO, since TaskCancelled voids the labels', () => {
    const state = given(taskAssigned(alice), labelSubmitted(alice), qaPassed(1));

    const { decision, state: next } = whenObserved(state, billingRefunded(1, 'TASK_CANCELLED'));

    expect(rejectionCode(decision)).toBe('NOTHING_TO_UNDO');
    expect(next).toBe(state);
    expect(givenFrom(state, billingRefunded(1, 'TASK_CANCELLED'))).toBe(state);
  });
});

describe('label-svc: a cancelled task', () => {
  it('voids submitted and accepted labels as CANCELLED, keeps rejected ones, and clears the assignment', () => {
    const state = given(taskAssigned(alice), labelSubmitted(alice), qaRejected(1), taskAssigned(bob, 2), labelSubmitted(bob, 2));

    const { decision, state: next } = whenObserved(state, taskCancelled(2));

    expect(decision).toEqual({ ok: true, events: [] });
    expect(next.cancelled).toBe(true);
    expect(next.assignment).toEqual({ projectId, attempt: 2, annotatorId: null, leaseExpiresAt: null, version: 0 });
    expect(statuses(next)).toEqual([
      [1, 'rejected', null],
      [2, 'voided', 'CANCELLED'],
    ]);
  });

  it('voids accepted labels as CANCELLED', () => {
    const { state } = whenObserved(given(taskAssigned(alice), labelSubmitted(alice), qaPassed(1)), taskCancelled(1));

    expect(statuses(state)).toEqual([[1, 'voided', 'CANCELLED']]);
  });

  it('records the cancellation even for a task label-svc has never seen', () => {
    const { decision, state } = whenObserved(given(), taskCancelled(1));

    expect(decision).toEqual({ ok: true, events: [] });
    expect(state).toMatchObject({ cancelled: true, assignment: { projectId, attempt: 1, annotatorId: null }, labels: [] });
  });

  it('ignores a TaskAssigned arriving after the cancellation with TASK_CANCELLED and refuses submissions', () => {
    const { decision, state } = whenObserved(given(taskCancelled(1)), taskAssigned(alice));

    expect(rejectionCode(decision)).toBe('TASK_CANCELLED');
    expect(state.assignment?.annotatorId).toBeNull();
    expect(givenFrom(state, taskAssigned(alice)).assignment?.annotatorId).toBeNull();
    expect(rejectionCode(decide(submit(alice), state))).toBe('TASK_CANCELLED');
  });

  it('keeps the labels voided when QaPassed arrives after the cancellation', () => {
    const state = given(taskAssigned(alice), labelSubmitted(alice), taskCancelled(1));

    const { decision, state: next } = whenObserved(state, qaPassed(1));

    expect(rejectionCode(decision)).toBe('TASK_CANCELLED');
    expect(statuses(next)).toEqual([[1, 'voided', 'CANCELLED']]);
    expect(givenFrom(state, qaPassed(1))).toBe(state);
  });

  it.each([
    ['TaskReopened', taskReopened(2)],
    ['QaRejected', qaRejected(1)],
    ['QaTimedOut', qaTimedOut(1)],
    ['BillingFailed', billingFailed(1)],
    ['BillingCompleted', billingCompleted(1)],
    ['BillingRefunded', billingRefunded(1, 'ATTEMPT_SUPERSEDED')],
    ['TaskCancelled', taskCancelled(1)],
  ] as const)('ignores a %s arriving after the cancellation and leaves the state untouched', (_type, event) => {
    const state = given(taskAssigned(alice), labelSubmitted(alice), taskCancelled(1));

    const { decision, state: next } = whenObserved(state, event);

    expect(rejectionCode(decision)).toBe('TASK_CANCELLED');
    expect(next).toBe(state);
    expect(evolve(state, event)).toBe(state);
  });
});

describe('label-svc: review timeouts', () => {
  it('voids the labels of the timed-out attempt as QA_TIMED_OUT', () => {
    const { decision, state } = whenObserved(given(taskAssigned(alice), labelSubmitted(alice)), qaTimedOut(1));

    expect(decision).toEqual({ ok: true, events: [] });
    expect(statuses(state)).toEqual([[1, 'voided', 'QA_TIMED_OUT']]);
  });

  it('voids only the timed-out attempt and leaves a newer one alone', () => {
    const state = given(taskAssigned(alice), labelSubmitted(alice), qaRejected(1), taskReopened(2), taskAssigned(bob, 2), labelSubmitted(bob, 2));

    expect(statuses(whenObserved(state, qaTimedOut(2)).state)).toEqual([
      [1, 'rejected', null],
      [2, 'voided', 'QA_TIMED_OUT'],
    ]);
  });

  it('rejects a timeout for an attempt without labels with LABEL_UNKNOWN', () => {
    expect(rejectionCode(whenObserved(given(taskAssigned(alice)), qaTimedOut(1)).decision)).toBe('LABEL_UNKNOWN');
  });
});

describe('label-svc: billing outcomes', () => {
  it('voids accepted labels as BILLING_FAILED when billing fails', () => {
    const { decision, state } = whenObserved(given(taskAssigned(alice), labelSubmitted(alice), qaPassed(1)), billingFailed(1));

    expect(decision).toEqual({ ok: true, events: [] });
    expect(statuses(state)).toEqual([[1, 'voided', 'BILLING_FAILED']]);
  });

  it('keeps labels voided when QaPassed arrives after the BillingFailed it caused', () => {
    const state = given(taskAssigned(alice), labelSubmitted(alice), billingFailed(1));

    const { decision, state: next } = whenObserved(state, qaPassed(1));

    expect(statuses(state)).toEqual([[1, 'voided', 'BILLING_FAILED']]);
    expect(rejectionCode(decision)).toBe('LABEL_VOIDED');
    expect(next).toBe(state);
    expect(givenFrom(state, qaPassed(1))).toBe(state);
  });

  it('keeps the first void reason when billing fails for labels already voided for another reason', () => {
    const before = given(taskAssigned(alice), labelSubmitted(alice), qaTimedOut(1));

    const { decision, state } = whenObserved(before, billingFailed(1));

    expect(rejectionCode(decision)).toBe('LABEL_VOIDED');
    expect(statuses(state)).toEqual([[1, 'voided', 'QA_TIMED_OUT']]);
    expect(statuses(givenFrom(before, billingFailed(1)))).toEqual([[1, 'voided', 'QA_TIMED_OUT']]);
  });

  it('accepts the labels again when BillingCompleted follows a BillingFailed (an admin retried billing)', () => {
    const { decision, state } = whenObserved(given(taskAssigned(alice), labelSubmitted(alice), qaPassed(1), billingFailed(1)), billingCompleted(1));

    expect(decision).toEqual({ ok: true, events: [] });
    expect(statuses(state)).toEqual([[1, 'accepted', null]]);
  });

  it('accepts submitted labels when BillingCompleted overtakes QaPassed, and keeps them accepted when QaPassed arrives', () => {
    const { state } = whenObserved(given(taskAssigned(alice), labelSubmitted(alice)), billingCompleted(1));
    const late = whenObserved(state, qaPassed(1));

    expect(statuses(state)).toEqual([[1, 'accepted', null]]);
    expect(late.decision).toEqual({ ok: true, events: [] });
    expect(late.state).toBe(state);
  });

  it('refuses a BillingFailed replayed from a dead-letter topic after the retry billed the attempt with ALREADY_BILLED, and keeps the labels accepted', () => {
    // The failure was dead-lettered here, so label-svc saw only the retry's BillingCompleted.
    const billed = given(taskAssigned(alice), labelSubmitted(alice), qaPassed(1), billingCompleted(1));

    const { decision, state } = whenObserved(billed, billingFailed(1));

    expect(rejectionCode(decision)).toBe('ALREADY_BILLED');
    expect(state).toBe(billed);
    expect(statuses(state)).toEqual([[1, 'accepted', null]]);
    expect(state.labels[0]!.billed).toBe(true);
  });

  it('marks the labels billed when BillingCompleted undoes a billing failure, so the failure cannot void them again', () => {
    const { state } = whenObserved(given(taskAssigned(alice), labelSubmitted(alice), qaPassed(1), billingFailed(1)), billingCompleted(1));

    expect(state.labels[0]!.billed).toBe(true);
    expect(rejectionCode(whenObserved(state, billingFailed(1)).decision)).toBe('ALREADY_BILLED');
  });

  it('leaves labels unbilled through QA and a billing failure', () => {
    const state = given(taskAssigned(alice), labelSubmitted(alice), qaPassed(1), billingFailed(1));

    expect(state.labels[0]!.billed).toBe(false);
  });

  it('does not revive labels voided for another reason when billing completes', () => {
    const before = given(taskAssigned(alice), labelSubmitted(alice), taskReopened(2, alice, 'LEASE_EXPIRED'));

    const { decision, state } = whenObserved(before, billingCompleted(1));

    expect(rejectionCode(decision)).toBe('LABEL_VOIDED');
    expect(statuses(state)).toEqual([[1, 'voided', 'SUPERSEDED']]);
    expect(statuses(givenFrom(before, billingCompleted(1)))).toEqual([[1, 'voided', 'SUPERSEDED']]);
  });

  it('rejects a billing outcome for an attempt without labels with LABEL_UNKNOWN', () => {
    expect(rejectionCode(whenObserved(given(taskAssigned(alice)), billingFailed(1)).decision)).toBe('LABEL_UNKNOWN');
    expect(rejectionCode(whenObserved(given(taskAssigned(alice)), billingCompleted(1)).decision)).toBe('LABEL_UNKNOWN');
  });
});

describe('label-svc: QA verdicts are final', () => {
  it('refuses a stray QaPassed for an attempt whose labels QA rejected, and the opposite', () => {
    const rejected = given(taskAssigned(alice), labelSubmitted(alice), qaRejected());
    expect(rejectionCode(decide(observe(qaPassed()), rejected))).toBe('VERDICT_FINAL');
    const accepted = given(taskAssigned(alice), labelSubmitted(alice), qaPassed());
    expect(rejectionCode(decide(observe(qaRejected()), accepted))).toBe('VERDICT_FINAL');
  });
});
