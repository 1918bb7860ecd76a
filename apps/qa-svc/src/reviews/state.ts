import type { AnnotatorId, BillingCompleted, BillingFailed, BillingRefunded, LabelSubmitted, ProjectId, QaPassed, QaRejected, QaStarted, QaTimedOut, ReviewerId, TaskCancelled, TaskId, TaskReopened } from '@labelflow/contracts';
import type { EventDraft } from '@labelflow/service-kit';

export const ReviewStatus = {
  pending: 'pending',
  passed: 'passed',
  rejected: 'rejected',
  timedOut: 'timed_out',
  /** A pass that was undone (billing failed, task cancelled, attempt superseded). */
  revoked: 'revoked',
  /** A pending review that will never be decided (task cancelled, attempt superseded). */
  voided: 'voided',
} as const;
export type ReviewStatus = (typeof ReviewStatus)[keyof typeof ReviewStatus];

/** Why a review was revoked or voided. */
export const CloseReason = { billingFailed: 'BILLING_FAILED', cancelled: 'CANCELLED', superseded: 'SUPERSEDED' } as const;
export type CloseReason = (typeof CloseReason)[keyof typeof CloseReason];

export interface Review {
  readonly attempt: number;
  readonly projectId: ProjectId;
  readonly annotatorId: AnnotatorId;
  readonly status: ReviewStatus;
  readonly reviewerId: ReviewerId | null;
  readonly reason: string | null;
  /** ISO instant after which a still-pending review times out (the review SLA). */
  readonly deadlineAt: string | null;
  /** Set exactly when status is revoked or voided. */
  readonly closeReason: CloseReason | null;
  /**
   * True once the attempt's BillingCompleted arrived. billing-svc never fails an attempt it billed,
   * so a BillingFailed seen after it is a dead letter replayed from before an admin's retry: stale.
   */
  readonly billed: boolean;
}

export interface ReviewTaskState {
  readonly taskId: TaskId;
  /** One review per labelled attempt, oldest first. */
  readonly reviews: readonly Review[];
  /**
   * The newest attempt task-svc announced (TaskReopened), 0 if none: kept in the task's row, which
   * exists even when no review does (a tombstone), so labels of an older attempt arriving late are stale.
   */
  readonly reopenedAttempt: number;
  /**
   * Who held an attempt without being its reviews' annotator, in the order qa-svc learnt of them:
   * the holder of an attempt a reopen ended (TaskReopened's previousAnnotatorId), whose labels may
   * never have reached qa-svc (stale after the reopen), and the holder of an attempt a model's
   * pre-label was submitted for (LabelSubmitted's heldBy). None of them may review the task: the
   * four-eyes rule counts them with the annotators of its reviews.
   */
  readonly formerAnnotators: readonly AnnotatorId[];
  /** Absorbing: once true, later events for the task are ignored and decisions refused. */
  readonly cancelled: boolean;
}

/**
 * qa-svc's own record that a review's SLA clock started. Never published: the public QaStarted
 * carries no deadline, so the decision adds this local event, folded right after QaStarted.
 */
export interface ReviewDeadlineSet {
  readonly type: 'ReviewDeadlineSet';
  readonly taskId: TaskId;
  readonly attempt: number;
  readonly deadlineAt: string;
}

/** Events from other services that qa-svc reacts to besides LabelSubmitted. */
export type ReviewObservedEvent = EventDraft<TaskReopened | TaskCancelled | BillingFailed | BillingCompleted | BillingRefunded>;
export type ReviewStateEvent = EventDraft<LabelSubmitted | QaStarted | QaPassed | QaRejected | QaTimedOut> | ReviewObservedEvent | ReviewDeadlineSet;

export const emptyState = (taskId: TaskId): ReviewTaskState => ({ taskId, reviews: [], reopenedAttempt: 0, formerAnnotators: [], cancelled: false });
/** Whether `who` labelled, or held, any attempt of the task: the four-eyes rule keeps them from reviewing it. */
export const workedOn = (state: ReviewTaskState, who: string): boolean => state.reviews.some((r) => String(r.annotatorId) === who) || state.formerAnnotators.some((a) => String(a) === who);
export const latestReview = (state: ReviewTaskState): Review | undefined => state.reviews[state.reviews.length - 1];
export const reviewOf = (state: ReviewTaskState, attempt: number): Review | undefined => state.reviews.find((r) => r.attempt === attempt);
/** The newest attempt qa-svc knows of, from a review or from a reopen. */
export const knownAttempt = (state: ReviewTaskState): number => Math.max(state.reopenedAttempt, latestReview(state)?.attempt ?? 0);

/** Applies `change` to every review; the state stays identical (evolve's no-op) when no review changed. */
const updateReviews = (state: ReviewTaskState, change: (review: Review) => Review): ReviewTaskState => {
  const reviews = state.reviews.map(change);
  return reviews.some((review, i) => review !== state.reviews[i]) ? { ...state, reviews } : state;
};

/** Changes the review of `attempt` if it is in status `from`. */
const transition = (state: ReviewTaskState, attempt: number, from: ReviewStatus, change: Partial<Review>): ReviewTaskState =>
  updateReviews(state, (r) => (r.attempt === attempt && r.status === from ? { ...r, ...change } : r));

const close = (status: typeof ReviewStatus.revoked | typeof ReviewStatus.voided, closeReason: CloseReason): Partial<Review> => ({ status, closeReason });

export function evolve(state: ReviewTaskState, event: ReviewStateEvent): ReviewTaskState {
  // A cancelled task is a tombstone: nothing that arrives later can revive or change it.
  if (state.cancelled) return state;
  switch (event.type) {
    case 'LabelSubmitted': {
      // The review item opens with QaStarted, which the decision emits alongside.
      const holder = event.payload.heldBy;
      if (holder === undefined || state.formerAnnotators.includes(holder)) return state;
      return { ...state, formerAnnotators: [...state.formerAnnotators, holder] };
    }
    case 'QaStarted':
      if (reviewOf(state, event.attempt)) return state;
      return {
        ...state,
        reviews: [
          ...state.reviews,
          { attempt: event.attempt, projectId: event.projectId, annotatorId: event.payload.annotatorId, status: ReviewStatus.pending, reviewerId: null, reason: null, deadlineAt: null, closeReason: null, billed: false },
        ],
      };
    case 'ReviewDeadlineSet':
      return transition(state, event.attempt, ReviewStatus.pending, { deadlineAt: event.deadlineAt });
    case 'QaPassed':
      return transition(state, event.attempt, ReviewStatus.pending, { status: ReviewStatus.passed, reviewerId: event.payload.reviewerId, reason: null });
    case 'QaRejected':
      return transition(state, event.attempt, ReviewStatus.pending, { status: ReviewStatus.rejected, reviewerId: event.payload.reviewerId, reason: event.payload.reason });
    case 'QaTimedOut':
      return transition(state, event.attempt, ReviewStatus.pending, { status: ReviewStatus.timedOut });
    case 'TaskReopened': {
      if (event.attempt <= state.reopenedAttempt) return state;
      const previous = event.payload.previousAnnotatorId;
      const formerAnnotators = previous === null || state.formerAnnotators.includes(previous) ? state.formerAnnotators : [...state.formerAnnotators, previous];
      const reopened = { ...state, reopenedAttempt: event.attempt, formerAnnotators };
      // The reopen ends every older attempt. A pass of one is revoked here too, not only on billing's
      // ATTEMPT_SUPERSEDED refund: billing refuses a late approval of a superseded attempt without
      // billing it, and then no refund ever comes.
      return updateReviews(reopened, (r) => {
        if (r.attempt >= event.attempt) return r;
        if (r.status === ReviewStatus.pending) return { ...r, ...close(ReviewStatus.voided, CloseReason.superseded) };
        if (r.status === ReviewStatus.passed) return { ...r, ...close(ReviewStatus.revoked, CloseReason.superseded) };
        return r;
      });
    }
    case 'TaskCancelled':
      return updateReviews({ ...state, cancelled: true }, (r) => {
        if (r.status === ReviewStatus.pending) return { ...r, ...close(ReviewStatus.voided, CloseReason.cancelled) };
        if (r.status === ReviewStatus.passed) return { ...r, ...close(ReviewStatus.revoked, CloseReason.cancelled) };
        return r;
      });
    case 'BillingFailed':
      return transition(state, event.attempt, ReviewStatus.passed, close(ReviewStatus.revoked, CloseReason.billingFailed));
    case 'BillingCompleted': {
      const review = reviewOf(state, event.attempt);
      if (!review || review.billed) return state;
      if (review.status === ReviewStatus.passed) return transition(state, event.attempt, ReviewStatus.passed, { billed: true });
      // An admin retried billing after the failure and it went through: the pass stands again.
      if (review.status !== ReviewStatus.revoked || review.closeReason !== CloseReason.billingFailed) return state;
      return transition(state, event.attempt, ReviewStatus.revoked, { status: ReviewStatus.passed, closeReason: null, billed: true });
    }
    case 'BillingRefunded': {
      const reason = event.payload.reason;
      switch (reason) {
        case 'TASK_CANCELLED':
          // Nothing to do here: TaskCancelled revoked the pass.
          return state;
        case 'ATTEMPT_SUPERSEDED':
          return transition(state, event.attempt, ReviewStatus.passed, close(ReviewStatus.revoked, CloseReason.superseded));
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
