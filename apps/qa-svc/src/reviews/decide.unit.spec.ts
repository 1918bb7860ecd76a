import { describe, expect, it } from 'vitest';
import type { AnnotatorId, BillingCompleted, BillingFailed, BillingRefunded, LabelSubmitted, ProjectId, QaPassed, QaRejected, QaStarted, QaTimedOut, ReviewerId, TaskCancelled, TaskId, TaskReopened } from '@labelflow/contracts';
import type { EventDraft } from '@labelflow/service-kit';
import { deciderSpec } from '@labelflow/testing';
import { decide, type ReviewCommand } from './decide';
import { emptyState, evolve, type ReviewDeadlineSet, type ReviewObservedEvent, type ReviewStateEvent, type ReviewTaskState } from './state';

const taskId = '11111111-1111-4111-8111-111111111111' as TaskId;
const projectId = '22222222-2222-4222-8222-222222222222' as ProjectId;
const alice = 'alice' as AnnotatorId;
const bob = 'bob' as AnnotatorId;
const reviewer = 'rev-1' as ReviewerId;
const hour = 3_600_000;
const slaMs = 72 * hour;
const t0 = new Date('2030-01-01T00:00:00.000Z');
const deadline = '2030-01-04T00:00:00.000Z';
const at = (ms: number) => new Date(t0.getTime() + ms);

const envelope = (attempt: number) => ({ version: 1 as const, taskId, projectId, attempt });
const labelSubmitted = (attempt = 1, annotatorId: AnnotatorId = alice): EventDraft<LabelSubmitted> => ({
  ...envelope(attempt),
  version: 2,
  type: 'LabelSubmitted',
  payload: { annotatorId, annotations: [{ label: 'cat' }], durationMs: null },
});
const qaStarted = (attempt = 1, annotatorId: AnnotatorId = alice): EventDraft<QaStarted> => ({ ...envelope(attempt), type: 'QaStarted', payload: { annotatorId } });
const deadlineSet = (attempt = 1, deadlineAt = deadline): ReviewDeadlineSet => ({ type: 'ReviewDeadlineSet', taskId, attempt, deadlineAt });
const qaPassed = (attempt = 1, annotatorId: AnnotatorId = alice): EventDraft<QaPassed> => ({ ...envelope(attempt), type: 'QaPassed', payload: { annotatorId, reviewerId: reviewer } });
const qaRejected = (attempt = 1, reason = 'wrong animal'): EventDraft<QaRejected> => ({ ...envelope(attempt), type: 'QaRejected', payload: { annotatorId: alice, reviewerId: reviewer, reason } });
const qaTimedOut = (attempt = 1, deadlineAt = deadline): EventDraft<QaTimedOut> => ({ ...envelope(attempt), type: 'QaTimedOut', payload: { annotatorId: alice, deadlineAt } });
const taskReopened = (attempt: number): EventDraft<TaskReopened> => ({
  ...envelope(attempt),
  type: 'TaskReopened',
  payload: { reason: 'QA_TIMED_OUT', previousAttempt: attempt - 1, previousAnnotatorId: alice },
});
const taskCancelled = (attempt = 1): EventDraft<TaskCancelled> => ({
  ...envelope(attempt),
  type: 'TaskCancelled',
  payload: { reason: 'project closed', cancelledBy: 'admin-1', previousStatus: 'approved' },
});
const billingFailed = (attempt = 1): EventDraft<BillingFailed> => ({
  ...envelope(attempt),
  type: 'BillingFailed',
  payload: { annotatorId: alice, reason: 'INJECTED_FAILURE', detail: 'chaos' },
});
const billingCompleted = (attempt = 1): EventDraft<BillingCompleted> => ({ ...envelope(attempt), type: 'BillingCompleted', payload: { annotatorId: alice, amount: 500 } });
const billingRefunded = (attempt: number, reason: BillingRefunded['payload']['reason']): EventDraft<BillingRefunded> => ({
  ...envelope(attempt),
  type: 'BillingRefunded',
  payload: { annotatorId: alice, amount: 500, reason },
});

/** A review opened at t0 as the service opens it: QaStarted and its deadline. */
const opened = (attempt = 1, annotatorId: AnnotatorId = alice): ReviewStateEvent[] => [qaStarted(attempt, annotatorId), deadlineSet(attempt)];
/** Labels open a review and a reopen or a billing outcome is observed: each such event is folded in before the decided ones. */
const spec = deciderSpec({ decide, evolve }, { initial: () => emptyState(taskId), observed: (c) => (c.type === 'OpenReview' || c.type === 'Observe' ? [c.event] : []) });
const { when, rejectionCode } = spec;
const given = (...events: (ReviewStateEvent | ReviewStateEvent[])[]): ReviewTaskState => spec.given(...events.flat());
const open = (attempt = 1, now = t0, annotatorId: AnnotatorId = alice): ReviewCommand => ({ type: 'OpenReview', event: labelSubmitted(attempt, annotatorId), now, slaMs });
const approve = (): ReviewCommand => ({ type: 'DecideReview', taskId, reviewerId: reviewer, decision: 'approve' });
const rejectWith = (reason?: string): ReviewCommand => ({ type: 'DecideReview', taskId, reviewerId: reviewer, decision: 'reject', ...(reason === undefined ? {} : { reason }) });
const timeOut = (now: Date): ReviewCommand => ({ type: 'TimeOutReview', taskId, now });
const observe = (event: ReviewObservedEvent): ReviewCommand => ({ type: 'Observe', event });
const statuses = (state: ReviewTaskState) => state.reviews.map((r) => [r.attempt, r.status, r.closeReason]);

describe('qa-svc: opening reviews', () => {
  it('opens a review with QaStarted and a deadline one SLA after now when labels are submitted', () => {
    expect(decide(open(1), given())).toEqual({ ok: true, events: [qaStarted(1), deadlineSet(1, deadline)] });
  });

  it('folds QaStarted and its deadline into a pending review for the labelled attempt', () => {
    expect(when(given(), open(1)).state.reviews).toEqual([
      { attempt: 1, projectId, annotatorId: alice, status: 'pending', reviewerId: null, reason: null, deadlineAt: deadline, closeReason: null, billed: false },
    ]);
  });

  it('rejects labels for an attempt that is already under review with REVIEW_EXISTS', () => {
    expect(rejectionCode(decide(open(1), given(opened(1))))).toBe('REVIEW_EXISTS');
  });

  it('rejects labels for an older attempt arriving after a newer one with STALE_ATTEMPT', () => {
    expect(rejectionCode(decide(open(1), given(opened(2))))).toBe('STALE_ATTEMPT');
  });

  it('opens a new review for attempt 2 after attempt 1 was rejected', () => {
    const { decision, state } = when(given(opened(1), qaRejected(1)), open(2, at(hour)));

    expect(decision).toEqual({ ok: true, events: [qaStarted(2), deadlineSet(2, at(hour + slaMs).toISOString())] });
    expect(statuses(state)).toEqual([
      [1, 'rejected', null],
      [2, 'pending', null],
    ]);
  });
});

describe('qa-svc: reviewing a reworked task', () => {
  it('opens the attempt 2 review for the new annotator when its LabelSubmitted is folded as execute folds it', () => {
    const { decision, state } = when(given(opened(1), qaRejected(1)), open(2, t0, bob));

    expect(decision).toEqual({ ok: true, events: [qaStarted(2, bob), deadlineSet(2)] });
    expect(state.reviews).toEqual([
      { attempt: 1, projectId, annotatorId: alice, status: 'rejected', reviewerId: reviewer, reason: 'wrong animal', deadlineAt: deadline, closeReason: null, billed: false },
      { attempt: 2, projectId, annotatorId: bob, status: 'pending', reviewerId: null, reason: null, deadlineAt: deadline, closeReason: null, billed: false },
    ]);
  });

  it('passes attempt 2 and leaves the rejection of attempt 1 on record', () => {
    const { decision, state } = when(given(opened(1), qaRejected(1), taskReopened(2), opened(2, bob)), approve());

    expect(decision).toEqual({ ok: true, events: [qaPassed(2, bob)] });
    expect(statuses(state)).toEqual([
      [1, 'rejected', null],
      [2, 'passed', null],
    ]);
  });

  it('rejects a late LabelSubmitted for the rejected attempt with STALE_ATTEMPT once attempt 2 is under review', () => {
    expect(rejectionCode(decide(open(1), given(opened(1), qaRejected(1), opened(2, bob))))).toBe('STALE_ATTEMPT');
  });
});

describe('qa-svc: deciding reviews', () => {
  it('emits QaPassed naming the reviewer and the annotator when the review is approved', () => {
    expect(decide(approve(), given(opened(1)))).toEqual({ ok: true, events: [qaPassed(1)] });
  });

  it('rejects a rejection without a reason with REASON_REQUIRED', () => {
    expect(rejectionCode(decide(rejectWith(undefined), given(opened(1))))).toBe('REASON_REQUIRED');
    expect(rejectionCode(decide(rejectWith(''), given(opened(1))))).toBe('REASON_REQUIRED');
  });

  it('emits QaRejected with the reason when the review is rejected with one', () => {
    expect(decide(rejectWith('wrong animal'), given(opened(1)))).toEqual({ ok: true, events: [qaRejected(1, 'wrong animal')] });
  });

  it('records the reviewer and reason on the review when QaRejected is folded', () => {
    expect(given(opened(1), qaRejected(1)).reviews[0]).toMatchObject({ status: 'rejected', reviewerId: reviewer, reason: 'wrong animal' });
  });

  it('rejects deciding a review that was already approved with REVIEW_ALREADY_DECIDED', () => {
    const state = given(opened(1), qaPassed(1));

    expect(rejectionCode(decide(approve(), state))).toBe('REVIEW_ALREADY_DECIDED');
    expect(rejectionCode(decide(rejectWith('changed my mind'), state))).toBe('REVIEW_ALREADY_DECIDED');
  });

  it('rejects deciding a review that was already rejected with REVIEW_ALREADY_DECIDED', () => {
    expect(rejectionCode(decide(approve(), given(opened(1), qaRejected(1))))).toBe('REVIEW_ALREADY_DECIDED');
  });

  it('rejects deciding a task that has no review with REVIEW_NOT_FOUND', () => {
    expect(rejectionCode(decide(approve(), given()))).toBe('REVIEW_NOT_FOUND');
  });

  it('decides the latest attempt once attempt 2 is under review', () => {
    expect(decide(approve(), given(opened(1), qaRejected(1), taskReopened(2), opened(2)))).toEqual({ ok: true, events: [qaPassed(2)] });
  });

  it('refuses the annotator of the attempt under review as its reviewer with SELF_REVIEW', () => {
    const decision = decide({ type: 'DecideReview', taskId, reviewerId: String(alice) as ReviewerId, decision: 'approve' }, given(opened(1)));

    expect(rejectionCode(decision)).toBe('SELF_REVIEW');
  });

  it('refuses a reviewer who labelled an earlier attempt of the task with SELF_REVIEW, and lets another reviewer decide it', () => {
    // alice labelled attempt 1, which rev-1 rejected; bob labelled attempt 2.
    const state = given(opened(1), qaRejected(1), taskReopened(2), opened(2, bob));
    const asAlice = (decision: 'approve' | 'reject'): ReviewCommand => ({ type: 'DecideReview', taskId, reviewerId: String(alice) as ReviewerId, decision, reason: 'looks wrong' });

    expect(rejectionCode(decide(asAlice('approve'), state))).toBe('SELF_REVIEW');
    expect(rejectionCode(decide(asAlice('reject'), state))).toBe('SELF_REVIEW');
    expect(decide(approve(), state)).toEqual({ ok: true, events: [qaPassed(2, bob)] });
  });

  it('answers REVIEW_NOT_FOUND (not yet) to a decision on attempt 2 until the reopen that began it has come, so a former holder is known before anyone judges it', () => {
    // bob let his lease on attempt 1 run out; alice labelled attempt 2, whose labels overtook the reopen.
    const leaseExpired: EventDraft<TaskReopened> = { ...taskReopened(2), payload: { reason: 'LEASE_EXPIRED', previousAttempt: 1, previousAnnotatorId: bob } };
    const labelsFirst = given(opened(2, alice));
    const asBob: ReviewCommand = { type: 'DecideReview', taskId, reviewerId: String(bob) as ReviewerId, decision: 'approve' };

    expect(decide(asBob, labelsFirst)).toMatchObject({ ok: false, reason: { code: 'REVIEW_NOT_FOUND', message: expect.stringContaining('not yet') } });
    expect(rejectionCode(decide(approve(), labelsFirst))).toBe('REVIEW_NOT_FOUND');
    const { state } = when(labelsFirst, observe(leaseExpired));
    expect(rejectionCode(decide(asBob, state))).toBe('SELF_REVIEW');
    expect(decide(approve(), state)).toEqual({ ok: true, events: [qaPassed(2, alice)] });
  });

  it('refuses with SELF_REVIEW the holder of an attempt whose labels a model submitted, and lets another reviewer decide it', () => {
    const model = 'model.cat-detector@2.1' as AnnotatorId;
    const machineLabels: EventDraft<LabelSubmitted> = { ...labelSubmitted(1, model), payload: { ...labelSubmitted(1, model).payload, heldBy: alice } };
    const { state } = when(given(), { type: 'OpenReview', event: machineLabels, now: t0, slaMs });
    expect(state.formerAnnotators).toEqual([alice]);
    const asAlice: ReviewCommand = { type: 'DecideReview', taskId, reviewerId: String(alice) as ReviewerId, decision: 'approve' };

    expect(rejectionCode(decide(asAlice, state))).toBe('SELF_REVIEW');
    expect(decide(approve(), state)).toEqual({ ok: true, events: [qaPassed(1, model)] });
  });

  it('refuses with SELF_REVIEW a reviewer whose labels for an ended attempt arrived after its reopen and were stale', () => {
    // alice's lease ran out while her labels waited in label-svc's outbox: the reopen came first.
    const leaseExpired: EventDraft<TaskReopened> = { ...taskReopened(2), payload: { reason: 'LEASE_EXPIRED', previousAttempt: 1, previousAnnotatorId: alice } };
    const reopened = given(leaseExpired);
    expect(rejectionCode(decide(open(1, t0, alice), reopened))).toBe('STALE_ATTEMPT');
    const state = given(leaseExpired, opened(2, bob));
    const asAlice: ReviewCommand = { type: 'DecideReview', taskId, reviewerId: String(alice) as ReviewerId, decision: 'approve' };

    expect(rejectionCode(decide(asAlice, state))).toBe('SELF_REVIEW');
    expect(decide(approve(), state)).toEqual({ ok: true, events: [qaPassed(2, bob)] });
  });

  it.each([
    ['timed out', [opened(1), qaTimedOut(1)]],
    ['revoked after a billing failure', [opened(1), qaPassed(1), billingFailed(1)]],
    ['voided by a reopen', [opened(1), taskReopened(2)]],
  ] as const)('rejects deciding a review that was %s with REVIEW_CLOSED', (_how, history) => {
    expect(rejectionCode(decide(approve(), given(...history)))).toBe('REVIEW_CLOSED');
  });
});

describe('qa-svc: the review deadline', () => {
  it('emits nothing before the deadline, with REVIEW_NOT_DUE', () => {
    expect(rejectionCode(decide(timeOut(at(slaMs - 1)), given(opened(1))))).toBe('REVIEW_NOT_DUE');
  });

  it('emits QaTimedOut for the attempt with its annotator and deadline once the deadline is reached', () => {
    const { decision, state } = when(given(opened(1)), timeOut(new Date(deadline)));

    expect(decision).toEqual({ ok: true, events: [qaTimedOut(1)] });
    expect(statuses(state)).toEqual([[1, 'timed_out', null]]);
  });

  it('fires only once: a second sweep of the timed-out review emits nothing', () => {
    const first = when(given(opened(1)), timeOut(at(slaMs + 1)));

    const second = decide(timeOut(at(slaMs + 2)), first.state);

    expect(first.decision.ok).toBe(true);
    expect(rejectionCode(second)).toBe('REVIEW_CLOSED');
  });

  it('emits nothing when the review was decided before its deadline was swept', () => {
    expect(rejectionCode(decide(timeOut(at(slaMs + 1)), given(opened(1), qaPassed(1))))).toBe('REVIEW_ALREADY_DECIDED');
  });

  it('emits nothing for a review without a deadline', () => {
    expect(rejectionCode(decide(timeOut(at(100 * slaMs)), given(qaStarted(1))))).toBe('REVIEW_NOT_DUE');
  });

  it('times out only the latest attempt, never an older one', () => {
    const state = given(opened(1), qaRejected(1), qaStarted(2), deadlineSet(2, at(2 * slaMs).toISOString()));

    expect(rejectionCode(decide(timeOut(at(slaMs + 1)), state))).toBe('REVIEW_NOT_DUE');
    expect(decide(timeOut(at(2 * slaMs)), state)).toEqual({ ok: true, events: [qaTimedOut(2, at(2 * slaMs).toISOString())] });
  });

  it('refuses a reviewer decision on a timed-out review with REVIEW_CLOSED', () => {
    expect(rejectionCode(decide(approve(), given(opened(1), qaTimedOut(1))))).toBe('REVIEW_CLOSED');
  });

  it('emits nothing for a cancelled task, with TASK_CANCELLED', () => {
    expect(rejectionCode(decide(timeOut(at(slaMs + 1)), given(opened(1), taskCancelled(1))))).toBe('TASK_CANCELLED');
  });
});

describe('qa-svc: a reopened task', () => {
  it('voids pending reviews of older attempts as SUPERSEDED and records the new attempt', () => {
    const { decision, state } = when(given(opened(1)), observe(taskReopened(2)));

    expect(decision).toEqual({ ok: true, events: [] });
    expect(state.reopenedAttempt).toBe(2);
    expect(statuses(state)).toEqual([[1, 'voided', 'SUPERSEDED']]);
  });

  it('keeps rejected reviews of older attempts as they are', () => {
    expect(statuses(when(given(opened(1), qaRejected(1)), observe(taskReopened(2))).state)).toEqual([[1, 'rejected', null]]);
  });

  it('revokes a passed review of an older attempt as SUPERSEDED on the reopen, whether or not billing ever refunds it', () => {
    // Billing refuses a late approval of a superseded attempt without billing it, so no
    // ATTEMPT_SUPERSEDED refund would come to revoke this pass: the reopen itself must.
    const { state } = when(given(opened(1), qaPassed(1)), observe(taskReopened(2)));
    expect(statuses(state)).toEqual([[1, 'revoked', 'SUPERSEDED']]);

    const refund = decide(observe(billingRefunded(1, 'ATTEMPT_SUPERSEDED')), state);
    expect(rejectionCode(refund)).toBe('NOTHING_TO_UNDO');
  });

  it('records the reopen even before qa-svc has seen any review of the task (tombstone)', () => {
    const { decision, state } = when(given(), observe(taskReopened(2)));

    expect(decision).toEqual({ ok: true, events: [] });
    expect(state).toMatchObject({ reopenedAttempt: 2, reviews: [] });
  });

  it('ignores labels of the superseded attempt arriving after the reopen with STALE_ATTEMPT', () => {
    const state = given(taskReopened(2));

    const { decision, state: next } = when(state, open(1));

    expect(rejectionCode(decision)).toBe('STALE_ATTEMPT');
    expect(next.reviews).toEqual([]);
  });

  it("opens the new attempt's review after the reopen", () => {
    expect(decide(open(2), given(opened(1), taskReopened(2)))).toEqual({ ok: true, events: [qaStarted(2), deadlineSet(2)] });
  });

  it('keeps a review of the new attempt pending when its labels overtook the reopen', () => {
    const { state } = when(given(opened(1), opened(2)), observe(taskReopened(2)));

    expect(statuses(state)).toEqual([
      [1, 'voided', 'SUPERSEDED'],
      [2, 'pending', null],
    ]);
  });

  it('ignores a reopen for an attempt already recorded with STALE_ATTEMPT', () => {
    const state = given(opened(1), taskReopened(3));

    expect(rejectionCode(decide(observe(taskReopened(2)), state))).toBe('STALE_ATTEMPT');
    expect(rejectionCode(decide(observe(taskReopened(3)), state))).toBe('STALE_ATTEMPT');
    expect(evolve(state, taskReopened(2))).toBe(state);
  });
});

describe('qa-svc: a cancelled task', () => {
  it('voids a pending review as CANCELLED', () => {
    const { decision, state } = when(given(opened(1)), observe(taskCancelled(1)));

    expect(decision).toEqual({ ok: true, events: [] });
    expect(state.cancelled).toBe(true);
    expect(statuses(state)).toEqual([[1, 'voided', 'CANCELLED']]);
  });

  it('revokes a passed review as CANCELLED and keeps rejected ones', () => {
    expect(statuses(when(given(opened(1), qaRejected(1), opened(2), qaPassed(2)), observe(taskCancelled(2))).state)).toEqual([
      [1, 'rejected', null],
      [2, 'revoked', 'CANCELLED'],
    ]);
  });

  it('opens no review when LabelSubmitted arrives after the cancellation of a task never seen', () => {
    const cancelled = when(given(), observe(taskCancelled(1))).state;

    const { decision, state } = when(cancelled, open(1));

    expect(cancelled.cancelled).toBe(true);
    expect(rejectionCode(decision)).toBe('TASK_CANCELLED');
    expect(state.reviews).toEqual([]);
  });

  it('refuses reviewer decisions with TASK_CANCELLED', () => {
    expect(rejectionCode(decide(approve(), given(opened(1), taskCancelled(1))))).toBe('TASK_CANCELLED');
    expect(rejectionCode(decide(approve(), given(taskCancelled(1))))).toBe('TASK_CANCELLED');
  });

  it.each([
    ['TaskReopened', taskReopened(2)],
    ['BillingFailed', billingFailed(1)],
    ['BillingCompleted', billingCompleted(1)],
    ['BillingRefunded', billingRefunded(1, 'ATTEMPT_SUPERSEDED')],
    ['TaskCancelled', taskCancelled(1)],
  ] as const)('ignores a %s arriving after the cancellation and leaves the state untouched', (_type, event) => {
    const state = given(opened(1), qaPassed(1), taskCancelled(1));

    const { decision, state: next } = when(state, observe(event));

    expect(rejectionCode(decision)).toBe('TASK_CANCELLED');
    expect(next).toBe(state);
    expect(evolve(state, event)).toBe(state);
  });

  it('keeps the state untouched when late QaStarted or QaPassed events are folded after the cancellation', () => {
    const state = given(opened(1), taskCancelled(1));

    expect(given(opened(1), taskCancelled(1), qaPassed(1), qaStarted(2))).toEqual(state);
  });
});

describe('qa-svc: billing outcomes', () => {
  it('revokes a passed review as BILLING_FAILED when billing fails', () => {
    const { decision, state } = when(given(opened(1), qaPassed(1)), observe(billingFailed(1)));

    expect(decision).toEqual({ ok: true, events: [] });
    expect(statuses(state)).toEqual([[1, 'revoked', 'BILLING_FAILED']]);
  });

  it('passes the review again when BillingCompleted follows the BillingFailed (an admin retried billing)', () => {
    const { decision, state } = when(given(opened(1), qaPassed(1), billingFailed(1)), observe(billingCompleted(1)));

    expect(decision).toEqual({ ok: true, events: [] });
    expect(statuses(state)).toEqual([[1, 'passed', null]]);
    expect(state.reviews[0]?.reviewerId).toBe(reviewer);
  });

  it('records BillingCompleted on a pass as billed and leaves the review passed', () => {
    const state = given(opened(1), qaPassed(1));

    const { decision, state: next } = when(state, observe(billingCompleted(1)));

    expect(decision).toEqual({ ok: true, events: [] });
    expect(statuses(next)).toEqual([[1, 'passed', null]]);
    expect(next.reviews[0]?.billed).toBe(true);
    expect(rejectionCode(decide(observe(billingCompleted(1)), next))).toBe('NOTHING_TO_UNDO');
  });

  it('refuses a BillingFailed replayed from a dead-letter topic after the retry billed the attempt with ALREADY_BILLED, and keeps the pass', () => {
    // The failure was dead-lettered here, so qa-svc saw only the retry's BillingCompleted.
    const billed = given(opened(1), qaPassed(1), billingCompleted(1));

    const { decision, state } = when(billed, observe(billingFailed(1)));

    expect(rejectionCode(decision)).toBe('ALREADY_BILLED');
    expect(state).toBe(billed);
    expect(statuses(state)).toEqual([[1, 'passed', null]]);
  });

  it('marks the review billed when BillingCompleted undoes a billing failure, so the failure cannot revoke it again', () => {
    const { state } = when(given(opened(1), qaPassed(1), billingFailed(1)), observe(billingCompleted(1)));

    expect(state.reviews[0]?.billed).toBe(true);
    expect(rejectionCode(decide(observe(billingFailed(1)), state))).toBe('ALREADY_BILLED');
  });

  it('does not restore a review revoked for another reason when billing completes', () => {
    const state = given(opened(1), qaPassed(1), billingRefunded(1, 'ATTEMPT_SUPERSEDED'));

    expect(rejectionCode(decide(observe(billingCompleted(1)), state))).toBe('NOTHING_TO_UNDO');
    expect(statuses(evolve(state, billingCompleted(1)))).toEqual([[1, 'revoked', 'SUPERSEDED']]);
  });

  it('ignores BillingFailed for a review that is not passed, with NOTHING_TO_UNDO', () => {
    expect(rejectionCode(decide(observe(billingFailed(1)), given(opened(1), qaTimedOut(1))))).toBe('NOTHING_TO_UNDO');
  });

  it('ignores a billing outcome for an attempt without a review, with REVIEW_NOT_FOUND', () => {
    expect(rejectionCode(decide(observe(billingFailed(2)), given(opened(1), qaPassed(1))))).toBe('REVIEW_NOT_FOUND');
  });

  it('revokes a passed review as SUPERSEDED when billing refunds the attempt as superseded', () => {
    expect(statuses(when(given(opened(1), qaPassed(1)), observe(billingRefunded(1, 'ATTEMPT_SUPERSEDED'))).state)).toEqual([[1, 'revoked', 'SUPERSEDED']]);
  });

  it('ignores a refund for a cancelled task with NOTHING_TO_UNDO, since TaskCancelled revokes the review', () => {
    const state = given(opened(1), qaPassed(1));

    expect(rejectionCode(decide(observe(billingRefunded(1, 'TASK_CANCELLED')), state))).toBe('NOTHING_TO_UNDO');
    expect(evolve(state, billingRefunded(1, 'TASK_CANCELLED'))).toBe(state);
  });
});
