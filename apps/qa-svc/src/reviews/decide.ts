import type { LabelSubmitted, QaEvent, ReviewerId, TaskId } from '@labelflow/contracts';
import type { Decision, EventDraft, Rejection } from '@labelflow/service-kit';
import { CloseReason, knownAttempt, latestReview, reviewOf, ReviewStatus, workedOn, type Review, type ReviewDeadlineSet, type ReviewObservedEvent, type ReviewTaskState } from './state';

export const ReviewDecision = { approve: 'approve', reject: 'reject' } as const;
export type ReviewDecision = (typeof ReviewDecision)[keyof typeof ReviewDecision];

export type ReviewCommand =
  /** `now` and `slaMs` come from the caller, so the decision stays pure. */
  | { readonly type: 'OpenReview'; readonly event: EventDraft<LabelSubmitted>; readonly now: Date; readonly slaMs: number }
  | {
      readonly type: 'DecideReview';
      readonly taskId: TaskId;
      readonly reviewerId: ReviewerId;
      readonly decision: ReviewDecision;
      readonly reason?: string;
      /** The attempt the reviewer looked at; when given, a decision never lands on another one. */
      readonly attempt?: number;
    }
  | { readonly type: 'TimeOutReview'; readonly taskId: TaskId; readonly now: Date }
  | { readonly type: 'Observe'; readonly event: ReviewObservedEvent };

export const ReviewRejections = {
  REVIEW_NOT_FOUND: 'REVIEW_NOT_FOUND',
  REVIEW_ALREADY_DECIDED: 'REVIEW_ALREADY_DECIDED',
  REVIEW_CLOSED: 'REVIEW_CLOSED',
  REVIEW_EXISTS: 'REVIEW_EXISTS',
  REVIEW_NOT_DUE: 'REVIEW_NOT_DUE',
  STALE_ATTEMPT: 'STALE_ATTEMPT',
  REASON_REQUIRED: 'REASON_REQUIRED',
  TASK_CANCELLED: 'TASK_CANCELLED',
  NOTHING_TO_UNDO: 'NOTHING_TO_UNDO',
  ALREADY_BILLED: 'ALREADY_BILLED',
  SELF_REVIEW: 'SELF_REVIEW',
} as const;
export type ReviewRejection = Rejection<(typeof ReviewRejections)[keyof typeof ReviewRejections]>;
/** What a decision yields: published qa events, plus qa-svc's own unpublished deadline record. */
export type ReviewDecidedEvent = EventDraft<QaEvent> | ReviewDeadlineSet;
export type ReviewDecisionResult = Decision<ReviewDecidedEvent, ReviewRejection>;

const reject = (code: ReviewRejection['code'], message: string): ReviewDecisionResult => ({ ok: false, reason: { code, message } });
const accept = (...events: ReviewDecidedEvent[]): ReviewDecisionResult => ({ ok: true, events });

export function decide(command: ReviewCommand, state: ReviewTaskState): ReviewDecisionResult {
  switch (command.type) {
    case 'OpenReview':
      return open(command, state);
    case 'DecideReview':
      return decideReview(command, state);
    case 'TimeOutReview':
      return timeOut(command, state);
    case 'Observe':
      return observe(command.event, state);
    default: {
      const unhandled: never = command;
      return unhandled;
    }
  }
}

function open(command: Extract<ReviewCommand, { type: 'OpenReview' }>, state: ReviewTaskState): ReviewDecisionResult {
  const { event } = command;
  if (state.cancelled) return reject('TASK_CANCELLED', `labels for attempt ${event.attempt} of a cancelled task`);
  const known = knownAttempt(state);
  if (event.attempt < known) return reject('STALE_ATTEMPT', `labels for attempt ${event.attempt} arrived after attempt ${known}`);
  if (reviewOf(state, event.attempt)) return reject('REVIEW_EXISTS', `attempt ${event.attempt} is already under review`);
  const { taskId, projectId, attempt } = event;
  const deadlineAt = new Date(command.now.getTime() + command.slaMs).toISOString();
  return accept(
    { type: 'QaStarted', version: 1, taskId, projectId, attempt, payload: { annotatorId: event.payload.annotatorId } },
    { type: 'ReviewDeadlineSet', taskId, attempt, deadlineAt },
  );
}

/** Why the review cannot be decided (or timed out) any more; undefined while it is pending. */
function undecidable(review: Review): ReviewDecisionResult | undefined {
  const status = review.status;
  switch (status) {
    case ReviewStatus.pending:
      return undefined;
    case ReviewStatus.passed:
    case ReviewStatus.rejected:
      return reject('REVIEW_ALREADY_DECIDED', `attempt ${review.attempt} was already ${status}`);
    case ReviewStatus.timedOut:
    case ReviewStatus.revoked:
    case ReviewStatus.voided:
      return reject('REVIEW_CLOSED', `the review of attempt ${review.attempt} is closed (${status}${review.closeReason ? `: ${review.closeReason}` : ''})`);
    default: {
      const unhandled: never = status;
      return unhandled;
    }
  }
}

function decideReview(command: Extract<ReviewCommand, { type: 'DecideReview' }>, state: ReviewTaskState): ReviewDecisionResult {
  if (state.cancelled) return reject('TASK_CANCELLED', `task ${command.taskId} was cancelled`);
  const review = latestReview(state);
  if (!review) return reject('REVIEW_NOT_FOUND', `task ${command.taskId} has no review (labels not submitted or not received yet)`);
  // A rework's labels may not have reached qa-svc yet: its review does not exist *yet*.
  if (command.attempt !== undefined && command.attempt > review.attempt) {
    return reject('REVIEW_NOT_FOUND', `attempt ${command.attempt} of task ${command.taskId} has no review yet (latest is attempt ${review.attempt})`);
  }
  if (command.attempt !== undefined && command.attempt < review.attempt) {
    return reject('STALE_ATTEMPT', `attempt ${command.attempt} was superseded by attempt ${review.attempt}`);
  }
  const closed = undecidable(review);
  if (closed) return closed;
  // Who held the attempts before this one is learnt from the reopen that began it (TaskReopened, on
  // the task topic), which can lag behind this attempt's labels (on the label topic): until it is
  // here the four-eyes check below could pass a former holder, so the review is not open yet.
  if (review.attempt > 1 && state.reopenedAttempt < review.attempt) {
    return reject('REVIEW_NOT_FOUND', `the review of attempt ${review.attempt} of task ${command.taskId} opens to decisions once the task's reopen to attempt ${review.attempt} reaches qa-svc (not yet)`);
  }
  // Four eyes: whoever labelled or held any attempt of the task never judges it, not even a later attempt.
  if (workedOn(state, String(command.reviewerId))) {
    return reject('SELF_REVIEW', `${command.reviewerId} labelled this task and may not review it`);
  }
  const base = { taskId: command.taskId, projectId: review.projectId, attempt: review.attempt, version: 1 } as const;
  if (command.decision === ReviewDecision.approve) {
    return accept({ ...base, type: 'QaPassed', payload: { annotatorId: review.annotatorId, reviewerId: command.reviewerId } });
  }
  if (!command.reason) return reject('REASON_REQUIRED', 'a rejection needs a reason');
  return accept({ ...base, type: 'QaRejected', payload: { annotatorId: review.annotatorId, reviewerId: command.reviewerId, reason: command.reason } });
}

/** The review SLA: the latest review, still pending at its deadline, times out (once). */
function timeOut(command: Extract<ReviewCommand, { type: 'TimeOutReview' }>, state: ReviewTaskState): ReviewDecisionResult {
  if (state.cancelled) return reject('TASK_CANCELLED', `task ${command.taskId} was cancelled`);
  const review = latestReview(state);
  if (!review) return reject('REVIEW_NOT_FOUND', `task ${command.taskId} has no review`);
  const closed = undecidable(review);
  if (closed) return closed;
  if (review.deadlineAt === null || Date.parse(review.deadlineAt) > command.now.getTime()) {
    return reject('REVIEW_NOT_DUE', `the review of attempt ${review.attempt} is due at ${review.deadlineAt ?? 'no deadline'}`);
  }
  return accept({
    type: 'QaTimedOut',
    version: 1,
    taskId: command.taskId,
    projectId: review.projectId,
    attempt: review.attempt,
    payload: { annotatorId: review.annotatorId, deadlineAt: review.deadlineAt },
  });
}

function observe(event: ReviewObservedEvent, state: ReviewTaskState): ReviewDecisionResult {
  // Cancellation is absorbing: late reopens and billing outcomes change nothing.
  if (state.cancelled) return reject('TASK_CANCELLED', `${event.type} for attempt ${event.attempt} of a cancelled task`);
  switch (event.type) {
    case 'TaskReopened':
      if (event.attempt <= state.reopenedAttempt) return reject('STALE_ATTEMPT', `reopen for attempt ${event.attempt}, qa-svc already knows attempt ${state.reopenedAttempt}`);
      return accept();
    case 'TaskCancelled':
      return accept();
    case 'BillingFailed':
      // Only a dead letter replayed after an admin's successful retry arrives behind BillingCompleted.
      if (reviewOf(state, event.attempt)?.billed) return reject('ALREADY_BILLED', `BillingFailed for attempt ${event.attempt}, which billing already completed (a replay from before a retry)`);
      return onReview(event, state, ReviewStatus.passed);
    case 'BillingCompleted': {
      // Recorded on the pass, so that a stale BillingFailed cannot revoke it afterwards.
      const review = reviewOf(state, event.attempt);
      if (review?.status === ReviewStatus.passed && !review.billed) return accept();
      if (review?.status === ReviewStatus.revoked && review.closeReason === CloseReason.billingFailed) return accept();
      return reject('NOTHING_TO_UNDO', `BillingCompleted for attempt ${event.attempt}: its review is not a pass billing has yet to confirm, nor revoked by a billing failure`);
    }
    case 'BillingRefunded': {
      const reason = event.payload.reason;
      switch (reason) {
        case 'TASK_CANCELLED':
          return reject('NOTHING_TO_UNDO', `refund of attempt ${event.attempt} for a cancelled task: TaskCancelled revokes the review`);
        case 'ATTEMPT_SUPERSEDED':
          return onReview(event, state, ReviewStatus.passed);
        default: {
          const unhandled: never = reason;
          return unhandled;
        }
      }
    }
    default: {
      const unhandled: never = event;
      return unhandled;
    }
  }
}

/** A compensation that undoes one attempt's review: it must exist and be in status `from`. */
function onReview(event: ReviewObservedEvent, state: ReviewTaskState, from: ReviewStatus): ReviewDecisionResult {
  const review = reviewOf(state, event.attempt);
  if (!review) return reject('REVIEW_NOT_FOUND', `${event.type} for attempt ${event.attempt}, which has no review`);
  if (review.status !== from) return reject('NOTHING_TO_UNDO', `${event.type} for attempt ${event.attempt}, whose review is ${review.status}, not ${from}`);
  return accept();
}
