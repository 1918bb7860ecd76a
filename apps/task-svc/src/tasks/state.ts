import { isMachineActor, type AnnotatorId, type BillingCompleted, type BillingFailed, type LabelSubmitted, type ProjectId, type QaPassed, type QaRejected, type QaStarted, type QaTimedOut, type TaskEvent, type TaskId } from '@labelflow/contracts';
import type { EventDraft } from '@labelflow/service-kit';

export const TaskStatus = {
  open: 'open',
  assigned: 'assigned',
  labelled: 'labelled',
  inReview: 'in_review',
  approved: 'approved',
  completed: 'completed',
  /** Billing failed for good; an admin may retry billing after a top-up. */
  failed: 'failed',
  cancelled: 'cancelled',
} as const;
export type TaskStatus = (typeof TaskStatus)[keyof typeof TaskStatus];

/**
 * Within one attempt, progress only moves forward. Events of the saga travel on different topics and
 * may arrive in any order (QaStarted before LabelSubmitted); ranking statuses makes a late,
 * lower-ranked event a no-op. Only TaskReopened moves backwards, and it starts a new attempt.
 */
export const statusRank: Readonly<Record<TaskStatus, number>> = {
  open: 0,
  assigned: 1,
  labelled: 2,
  in_review: 3,
  approved: 4,
  completed: 5,
  failed: 5,
  // Cancellation absorbs everything that arrives after it.
  cancelled: 6,
};

export interface TaskState {
  readonly taskId: TaskId;
  readonly projectId: ProjectId;
  readonly title: string;
  readonly dataUri: string;
  readonly taskNumber: string | null;
  readonly status: TaskStatus;
  readonly attempt: number;
  readonly assignee: AnnotatorId | null;
  /** When the current assignment lapses (ISO); null when nobody holds the task. */
  readonly leaseExpiresAt: string | null;
  /** Why the task failed or was cancelled. */
  readonly reason: string | null;
  /**
   * Who rejected an attempt of this task (`QaRejected.reviewerId`). None of them may claim a later
   * attempt: a reviewer who could would be paid for redoing, or copying, the work they turned down.
   */
  readonly rejectedBy: readonly string[];
  /**
   * Who held the attempts whose labels were submitted (a model's labels count for the person who
   * held the attempt; '' for someone unknown, on rows from before task-svc's migration 8).
   * Reviewers, managers and owners can read those labels, so none of them claims a later attempt
   * of work someone else did: they could submit it as theirs and be paid for it, as `rejectedBy`
   * keeps a rejecting reviewer from doing.
   */
  readonly labelledBy: readonly string[];
  /** Optimistic concurrency: bumped on every save, checked by compare-and-set. */
  readonly version: number;
}

/** Events the task's state is folded from: its own, and the saga steps it observes. */
export type ObservedEvent = EventDraft<LabelSubmitted | QaStarted | QaPassed | QaRejected | QaTimedOut | BillingCompleted | BillingFailed>;
export type TaskStateEvent = EventDraft<TaskEvent> | ObservedEvent;

/** The events that show an attempt's labels were submitted, whichever attempt they are of. */
export type WorkEvidence = EventDraft<LabelSubmitted | QaStarted | QaPassed | QaRejected | QaTimedOut>;
export const isWorkEvidence = (event: TaskStateEvent): event is WorkEvidence =>
  event.type === 'LabelSubmitted' || event.type === 'QaStarted' || event.type === 'QaPassed' || event.type === 'QaRejected' || event.type === 'QaTimedOut';

/**
 * Who held the attempt whose labels the event shows. qa-svc's events name a model for a model's
 * labels: the person who held that attempt comes from its LabelSubmitted (`heldBy`) or its reopen.
 */
const workerOf = (event: WorkEvidence): string | undefined => {
  if (event.type === 'LabelSubmitted') return event.payload.heldBy ?? event.payload.annotatorId;
  return isMachineActor(event.payload.annotatorId) ? undefined : event.payload.annotatorId;
};

/** Remembers who did the work the event shows, for the current attempt or an earlier one; the same state when known. */
export const rememberWork = (state: TaskState, event: WorkEvidence): TaskState => {
  const who = event.attempt <= state.attempt ? workerOf(event) : undefined;
  return who === undefined || state.labelledBy.includes(who) ? state : { ...state, labelledBy: [...state.labelledBy, who] };
};

/** Moves status forward for the current attempt only: an event of an older attempt is stale. */
const advance = (state: TaskState, attempt: number, to: TaskStatus): TaskState =>
  attempt === state.attempt && statusRank[to] > statusRank[state.status] ? { ...state, status: to, leaseExpiresAt: null } : state;

export function evolve(state: TaskState | null, event: TaskStateEvent): TaskState | null {
  if (event.type === 'TaskCreated') {
    return {
      taskId: event.taskId,
      projectId: event.projectId,
      title: event.payload.title,
      dataUri: event.payload.dataUri,
      taskNumber: event.payload.taskNumber ?? null,
      status: TaskStatus.open,
      attempt: event.attempt,
      assignee: null,
      leaseExpiresAt: null,
      reason: null,
      rejectedBy: [],
      labelledBy: [],
      version: 0,
    };
  }
  if (!state) return state;
  switch (event.type) {
    case 'TaskAssigned':
      if (event.attempt !== state.attempt) return state;
      if (state.status !== TaskStatus.open) return state;
      return { ...state, status: TaskStatus.assigned, assignee: event.payload.annotatorId, leaseExpiresAt: event.payload.leaseExpiresAt ?? null };
    case 'TaskReopened': {
      // A replayed or late reopen must not reset an attempt that has already moved on.
      if (event.attempt <= state.attempt || state.status === TaskStatus.cancelled) return state;
      // A review's verdict or timeout reopens labelled work, even when its LabelSubmitted has not
      // reached task-svc yet (it travels on another topic); its holder did that work ('' if unknown).
      const reviewed = event.payload.reason === 'QA_REJECTED' || event.payload.reason === 'QA_TIMED_OUT';
      const holder = event.payload.previousAnnotatorId ?? '';
      const labelledBy = reviewed && !state.labelledBy.includes(holder) ? [...state.labelledBy, holder] : state.labelledBy;
      return { ...state, status: TaskStatus.open, attempt: event.attempt, assignee: null, leaseExpiresAt: null, labelledBy };
    }
    case 'TaskFailed':
      return { ...state, status: TaskStatus.failed, reason: event.payload.detail };
    case 'TaskCancelled':
      return { ...state, status: TaskStatus.cancelled, leaseExpiresAt: null, reason: event.payload.reason };
    // Each also tells who did an attempt's work, of an attempt already reopened too (decide lets
    // such an event in for this alone: an expired lease may overtake labels still on their way).
    case 'LabelSubmitted':
      return rememberWork(advance(state, event.attempt, TaskStatus.labelled), event);
    case 'QaStarted':
      return rememberWork(advance(state, event.attempt, TaskStatus.inReview), event);
    case 'QaPassed':
      return rememberWork(advance(state, event.attempt, TaskStatus.approved), event);
    case 'QaRejected': {
      // The status changes through the TaskReopened decided alongside; the reviewer is remembered,
      // also for an attempt already reopened.
      if (event.attempt > state.attempt) return state;
      const remembered = rememberWork(state, event);
      return remembered.rejectedBy.includes(event.payload.reviewerId) ? remembered : { ...remembered, rejectedBy: [...remembered.rejectedBy, event.payload.reviewerId] };
    }
    case 'QaTimedOut':
      // The task changes through the TaskReopened decided alongside.
      return rememberWork(state, event);
    case 'BillingFailed':
      // These change the task only through the event decided alongside (TaskReopened, TaskFailed).
      return state;
    case 'BillingCompleted':
    case 'TaskCompleted':
      // A retried billing completes a task that had failed on billing.
      if (state.status === TaskStatus.failed && event.attempt === state.attempt) return { ...state, status: TaskStatus.completed, reason: null };
      return advance(state, event.attempt, TaskStatus.completed);
    default: {
      const unhandled: never = event;
      return unhandled;
    }
  }
}
