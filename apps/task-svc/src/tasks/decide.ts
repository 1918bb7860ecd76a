import { isMachineActor, type AnnotatorId, type ProjectId, type TaskId } from '@labelflow/contracts';
import type { Decision, EventDraft, Rejection } from '@labelflow/service-kit';
import type { BillingCompleted, BillingFailed, QaRejected, QaTimedOut, ReopenReason, TaskCancelled, TaskCompleted, TaskEvent, TaskFailed, TaskReopened } from '@labelflow/contracts';
import { isWorkEvidence, rememberWork, statusRank, TaskStatus, type ObservedEvent, type TaskState } from './state';

export type TaskCommand =
  | { readonly type: 'CreateTask'; readonly taskId: TaskId; readonly projectId: ProjectId; readonly title: string; readonly dataUri: string; readonly taskNumber?: string; readonly createdBy?: string }
  | {
      readonly type: 'ClaimTask';
      readonly taskId: TaskId;
      readonly annotatorId: AnnotatorId;
      readonly now: Date;
      readonly leaseMs: number;
      /** Whether the claimant's roles let them read other people's labels of the task (review.decide: label-svc's labels read). */
      readonly readsOthersWork: boolean;
    }
  | { readonly type: 'ExpireLease'; readonly taskId: TaskId; readonly now: Date; readonly graceMs: number }
  | { readonly type: 'CancelTask'; readonly taskId: TaskId; readonly reason: string; readonly cancelledBy: string }
  | { readonly type: 'Observe'; readonly event: ObservedEvent };

export const TaskRejections = {
  TASK_EXISTS: 'TASK_EXISTS',
  TASK_NOT_FOUND: 'TASK_NOT_FOUND',
  TASK_NOT_CLAIMABLE: 'TASK_NOT_CLAIMABLE',
  STALE_ATTEMPT: 'STALE_ATTEMPT',
  TASK_NOT_REOPENABLE: 'TASK_NOT_REOPENABLE',
  TASK_CANCELLED: 'TASK_CANCELLED',
  LEASE_NOT_DUE: 'LEASE_NOT_DUE',
  NOT_BILLABLE: 'NOT_BILLABLE',
  MACHINE_ACTOR_RESERVED: 'MACHINE_ACTOR_RESERVED',
  FORMER_REVIEWER: 'FORMER_REVIEWER',
  MAY_READ_EARLIER_WORK: 'MAY_READ_EARLIER_WORK',
} as const;
export type TaskRejection = Rejection<(typeof TaskRejections)[keyof typeof TaskRejections]>;
export type TaskDecision = Decision<EventDraft<TaskEvent>, TaskRejection>;

const accept = (...events: EventDraft<TaskEvent>[]): TaskDecision => ({ ok: true, events });
const reject = (code: TaskRejection['code'], message: string): TaskDecision => ({ ok: false, reason: { code, message } });

export function decide(command: TaskCommand, state: TaskState | null): TaskDecision {
  switch (command.type) {
    case 'CreateTask': {
      if (state) return reject('TASK_EXISTS', `task ${command.taskId} already exists`);
      const { taskId, projectId, title, dataUri, taskNumber, createdBy } = command;
      return accept({ type: 'TaskCreated', version: 1, taskId, projectId, attempt: 1, payload: { title, dataUri, ...(taskNumber ? { taskNumber } : {}), ...(createdBy ? { createdBy } : {}) } });
    }
    case 'ClaimTask': {
      if (!state) return reject('TASK_NOT_FOUND', `task ${command.taskId} does not exist`);
      // label-svc refuses labels from the machine form: a claim under it would hold the task for a
      // lease nobody could ever label in.
      if (isMachineActor(command.annotatorId)) {
        return reject('MACHINE_ACTOR_RESERVED', `${command.annotatorId} has the form of a model's annotator id (model.<name>@<version>), reserved for machine pre-labels`);
      }
      // Claiming a task you already hold is a no-op, so a retried claim cannot fail its own caller;
      // but not once the lease is over: label-svc refuses the labels from then on, and the
      // sweeper reopens the task, so a 200 would only mislead.
      if (state.status === TaskStatus.assigned && state.assignee === command.annotatorId) {
        if (state.leaseExpiresAt !== null && command.now.getTime() >= Date.parse(state.leaseExpiresAt)) {
          return reject('TASK_NOT_CLAIMABLE', `your lease on attempt ${state.attempt} expired at ${state.leaseExpiresAt}; the task reopens for a new claim once its grace has passed`);
        }
        return accept();
      }
      if (state.status !== TaskStatus.open) return reject('TASK_NOT_CLAIMABLE', `task is ${state.status}, not open`);
      // Four eyes, the other way round from qa-svc's SELF_REVIEW: whoever turned an attempt down
      // never does the rework, which they could copy from the rejected labels and be paid for.
      if (state.rejectedBy.includes(command.annotatorId)) {
        return reject('FORMER_REVIEWER', `${command.annotatorId} rejected an earlier attempt of this task and may not claim it`);
      }
      // The same for whoever could read someone else's labels of an earlier attempt without
      // rejecting them (a reviewer who sat on the review until it timed out, a manager): their own
      // earlier work they may redo.
      if (command.readsOthersWork && state.labelledBy.some((who) => who !== command.annotatorId)) {
        return reject('MAY_READ_EARLIER_WORK', `${command.annotatorId} may read labels someone else submitted for an earlier attempt of this task (as its reviewer, manager or owner) and may not claim its rework`);
      }
      const leaseExpiresAt = new Date(command.now.getTime() + command.leaseMs).toISOString();
      return accept({ type: 'TaskAssigned', version: 1, taskId: state.taskId, projectId: state.projectId, attempt: state.attempt, payload: { annotatorId: command.annotatorId, leaseExpiresAt } });
    }
    case 'ExpireLease':
      return expireLease(command, state);
    case 'CancelTask':
      return cancel(command, state);
    case 'Observe':
      return observe(command.event, state);
    default: {
      const unhandled: never = command;
      return unhandled;
    }
  }
}

function expireLease(command: Extract<TaskCommand, { type: 'ExpireLease' }>, state: TaskState | null): TaskDecision {
  if (!state) return reject('TASK_NOT_FOUND', `task ${command.taskId} does not exist`);
  // The grace absorbs labels submitted just before the lease ended that are still on their way.
  const due = state.leaseExpiresAt !== null && Date.parse(state.leaseExpiresAt) + command.graceMs <= command.now.getTime();
  if (state.status !== TaskStatus.assigned || !due) return reject('LEASE_NOT_DUE', `task is ${state.status}, lease ${state.leaseExpiresAt ?? 'none'}`);
  return accept(reopened(state, 'LEASE_EXPIRED'));
}

function cancel(command: Extract<TaskCommand, { type: 'CancelTask' }>, state: TaskState | null): TaskDecision {
  if (!state) return reject('TASK_NOT_FOUND', `task ${command.taskId} does not exist`);
  // Cancelling twice is a no-op, so an admin's retried request cannot fail.
  if (state.status === TaskStatus.cancelled) return accept();
  const cancelled: EventDraft<TaskCancelled> = {
    type: 'TaskCancelled',
    version: 1,
    taskId: state.taskId,
    projectId: state.projectId,
    attempt: state.attempt,
    payload: { reason: command.reason, cancelledBy: command.cancelledBy, previousStatus: state.status },
  };
  return accept(cancelled);
}

function observe(event: ObservedEvent, state: TaskState | null): TaskDecision {
  if (!state) return reject('TASK_NOT_FOUND', `${event.type} for unknown task ${event.taskId}`);
  if (state.status === TaskStatus.cancelled) return reject('TASK_CANCELLED', `${event.type} after the task was cancelled`);
  // An event of an attempt already reopened (an expired lease overtook it) moves nothing, but it
  // tells who did that attempt's work, and who rejected it: remembered, so that nobody who could
  // read the work copies it into the rework.
  if (event.attempt < state.attempt && isWorkEvidence(event)) {
    const rejecter = event.type === 'QaRejected' && !state.rejectedBy.includes(event.payload.reviewerId);
    if (rejecter || rememberWork(state, event) !== state) return accept();
  }
  // Only the current attempt moves the task; this also stops a late or duplicate QaRejected for an
  // attempt that was already reopened from reopening the task a second time.
  if (event.attempt !== state.attempt) return reject('STALE_ATTEMPT', `${event.type} is for attempt ${event.attempt}, task is on attempt ${state.attempt}`);
  switch (event.type) {
    case 'LabelSubmitted':
    case 'QaStarted':
    case 'QaPassed':
      return accept();
    case 'QaRejected':
    case 'QaTimedOut':
      return reopenAfterReview(event, state);
    case 'BillingCompleted':
      return complete(event, state);
    case 'BillingFailed':
      return fail(event, state);
    default: {
      const unhandled: never = event;
      return unhandled;
    }
  }
}

const reopened = (state: TaskState, reason: ReopenReason): EventDraft<TaskReopened> => ({
  type: 'TaskReopened',
  version: 1,
  taskId: state.taskId,
  projectId: state.projectId,
  attempt: state.attempt + 1,
  payload: { reason, previousAttempt: state.attempt, previousAnnotatorId: state.assignee },
});

function reopenAfterReview(event: EventDraft<QaRejected | QaTimedOut>, state: TaskState): TaskDecision {
  // A rejection contradicting an approval must not reopen, and so bill again, a task already paid for.
  if (statusRank[state.status] >= statusRank[TaskStatus.approved]) {
    return reject('TASK_NOT_REOPENABLE', `${event.type} for attempt ${event.attempt}, but the task is already ${state.status}`);
  }
  return accept(reopened(state, event.type === 'QaRejected' ? 'QA_REJECTED' : 'QA_TIMED_OUT'));
}

function fail(event: EventDraft<BillingFailed>, state: TaskState): TaskDecision {
  if (state.status === TaskStatus.completed || state.status === TaskStatus.failed) {
    return reject('NOT_BILLABLE', `BillingFailed for attempt ${event.attempt}, but the task is already ${state.status}`);
  }
  const failed: EventDraft<TaskFailed> = {
    type: 'TaskFailed',
    version: 1,
    taskId: state.taskId,
    projectId: state.projectId,
    attempt: state.attempt,
    payload: { reason: 'BILLING_FAILED', detail: `${event.payload.reason}: ${event.payload.detail}` },
  };
  return accept(failed);
}

function complete(event: EventDraft<BillingCompleted>, state: TaskState): TaskDecision {
  if (state.status === TaskStatus.completed) return accept();
  const completed: EventDraft<TaskCompleted> = {
    type: 'TaskCompleted',
    version: 1,
    taskId: state.taskId,
    projectId: state.projectId,
    attempt: state.attempt,
    payload: { annotatorId: event.payload.annotatorId },
  };
  return accept(completed);
}
