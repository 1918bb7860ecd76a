import { isMachineActor, machineActorId, type Annotation, type AnnotatorId, type LabelEvent, type PrelabelProposed, type TaskId } from '@labelflow/contracts';
import type { Decision, EventDraft, Rejection } from '@labelflow/service-kit';
import { endOlderAttempts, labelOf, LabelStatus, VoidReason, type Label, type LabelObservedEvent, type LabelTaskState, type PrelabelPolicy } from './state';

export type LabelCommand =
  | {
      readonly type: 'SubmitLabels';
      readonly taskId: TaskId;
      readonly annotatorId: AnnotatorId;
      readonly annotations: readonly Annotation[];
      readonly now: Date;
      /** The attempt the annotator claimed (from the claim's answer); labels never land on another. */
      readonly attempt?: number;
      /** How long the annotator worked, if their tool says; the event carries null otherwise. */
      readonly durationMs?: number;
    }
  | { readonly type: 'Observe'; readonly event: LabelObservedEvent }
  /** A model's proposal arrived; `now` decides whether the assignee's lease still allows labels. */
  | { readonly type: 'ReceivePrelabel'; readonly proposal: PrelabelProposed; readonly now: Date };

export const LabelRejections = {
  VERDICT_FINAL: 'VERDICT_FINAL',
  ASSIGNMENT_UNKNOWN: 'ASSIGNMENT_UNKNOWN',
  NOT_ASSIGNEE: 'NOT_ASSIGNEE',
  ALREADY_SUBMITTED: 'ALREADY_SUBMITTED',
  LEASE_EXPIRED: 'LEASE_EXPIRED',
  TASK_CANCELLED: 'TASK_CANCELLED',
  STALE_ATTEMPT: 'STALE_ATTEMPT',
  LABEL_UNKNOWN: 'LABEL_UNKNOWN',
  LABEL_VOIDED: 'LABEL_VOIDED',
  LABEL_REJECTED: 'LABEL_REJECTED',
  NOTHING_TO_UNDO: 'NOTHING_TO_UNDO',
  ALREADY_BILLED: 'ALREADY_BILLED',
  PROJECT_MISMATCH: 'PROJECT_MISMATCH',
  MACHINE_ACTOR_RESERVED: 'MACHINE_ACTOR_RESERVED',
} as const;
export type LabelRejection = Rejection<(typeof LabelRejections)[keyof typeof LabelRejections]>;
export type LabelDecision = Decision<EventDraft<LabelEvent>, LabelRejection>;

const reject = (code: LabelRejection['code'], message: string): LabelDecision => ({ ok: false, reason: { code, message } });
const accept = (...events: EventDraft<LabelEvent>[]): LabelDecision => ({ ok: true, events });

export function decide(command: LabelCommand, state: LabelTaskState): LabelDecision {
  switch (command.type) {
    case 'SubmitLabels':
      return submit(command, state);
    case 'Observe':
      return observe(command.event, state);
    case 'ReceivePrelabel':
      return receivePrelabel(command.proposal, state, command.now);
    default: {
      const unhandled: never = command;
      return unhandled;
    }
  }
}

function submit(command: Extract<LabelCommand, { type: 'SubmitLabels' }>, state: LabelTaskState): LabelDecision {
  const { assignment } = state;
  // The machine form names models only: billing pays no payout to it, so no person may label under it.
  if (isMachineActor(command.annotatorId)) return reject('MACHINE_ACTOR_RESERVED', `${command.annotatorId} has the form of a model's annotator id (model.<name>@<version>), reserved for machine pre-labels`);
  if (state.cancelled) return reject('TASK_CANCELLED', `task ${command.taskId} was cancelled`);
  if (!assignment) return reject('ASSIGNMENT_UNKNOWN', `task ${command.taskId} has no assignment (yet): claim it first, or retry shortly`);
  // The claim of a newer attempt has not reached label-svc yet: not a refusal, just "not yet".
  if (command.attempt !== undefined && command.attempt > assignment.attempt) {
    return reject('ASSIGNMENT_UNKNOWN', `attempt ${command.attempt} of task ${command.taskId} is not known here yet (latest is ${assignment.attempt}); retry shortly`);
  }
  if (command.attempt !== undefined && command.attempt < assignment.attempt) {
    return reject('STALE_ATTEMPT', `attempt ${command.attempt} was superseded by attempt ${assignment.attempt}`);
  }
  if (assignment.annotatorId === null) {
    return reject('ASSIGNMENT_UNKNOWN', `task ${command.taskId} was reopened for attempt ${assignment.attempt} and has no assignment (yet): claim it first, or retry shortly`);
  }
  if (assignment.annotatorId !== command.annotatorId) return reject('NOT_ASSIGNEE', `task ${command.taskId} is not assigned to ${command.annotatorId}`);
  if (labelOf(state, assignment.attempt)) return reject('ALREADY_SUBMITTED', `labels for attempt ${assignment.attempt} were already submitted`);
  // The lease is over at its expiry instant: task-svc reopens the task from that moment on.
  if (assignment.leaseExpiresAt !== null && command.now.getTime() >= Date.parse(assignment.leaseExpiresAt)) {
    return reject('LEASE_EXPIRED', `the lease of ${command.annotatorId} on attempt ${assignment.attempt} expired at ${assignment.leaseExpiresAt}`);
  }
  return accept({
    type: 'LabelSubmitted',
    version: 2,
    taskId: command.taskId,
    projectId: assignment.projectId,
    attempt: assignment.attempt,
    payload: { annotatorId: command.annotatorId, annotations: [...command.annotations], durationMs: command.durationMs ?? null },
  });
}

function observe(event: LabelObservedEvent, state: LabelTaskState): LabelDecision {
  const { assignment } = state;
  // Cancellation is absorbing: late assignments, reviews and billing outcomes change nothing.
  if (state.cancelled) return reject('TASK_CANCELLED', `${event.type} for attempt ${event.attempt} of a cancelled task`);
  switch (event.type) {
    case 'TaskAssigned':
      // An assignment for an older attempt arriving late must not take the task back.
      if (assignment && event.attempt < assignment.attempt) return reject('STALE_ATTEMPT', `assignment for attempt ${event.attempt} is older than ${assignment.attempt}`);
      return accept();
    case 'TaskReopened':
      if (assignment && event.attempt <= assignment.attempt) {
        // Late, yet some attempt it ends still holds live labels: only a replayed dead letter gets here.
        if (endOlderAttempts(state, event) !== state) return accept();
        return reject('STALE_ATTEMPT', `reopen for attempt ${event.attempt}, label-svc is already on attempt ${assignment.attempt}`);
      }
      return accept();
    case 'TaskCancelled':
      return accept();
    case 'QaPassed':
    case 'QaRejected':
      // A QA verdict on an attempt is final: a stray opposite verdict must not flip it.
      return onLabel(event, state, (label) =>
        label.status === (event.type === 'QaPassed' ? LabelStatus.rejected : LabelStatus.accepted)
          ? reject('VERDICT_FINAL', `${event.type} for attempt ${event.attempt}, whose labels were already ${label.status}`)
          : accept(),
      );
    case 'QaTimedOut':
      return onLabel(event, state, () => accept());
    case 'BillingFailed':
      // Only a dead letter replayed after an admin's successful retry arrives behind BillingCompleted.
      return onLabel(event, state, (label) => (label.billed ? reject('ALREADY_BILLED', `BillingFailed for attempt ${event.attempt}, which billing already completed (a replay from before a retry)`) : accept()), VoidReason.billingFailed);
    case 'BillingCompleted':
      return onLabel(
        event,
        state,
        (label) => (label.status === LabelStatus.rejected ? reject('LABEL_REJECTED', `BillingCompleted for attempt ${event.attempt}, whose labels were rejected`) : accept()),
        VoidReason.billingFailed,
      );
    case 'BillingRefunded': {
      const reason = event.payload.reason;
      switch (reason) {
        case 'TASK_CANCELLED':
          return reject('NOTHING_TO_UNDO', `refund of attempt ${event.attempt} for a cancelled task: TaskCancelled voids the labels`);
        case 'ATTEMPT_SUPERSEDED':
          return onLabel(event, state, () => accept());
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

/**
 * Guards for an outcome that targets one attempt's labels: they must exist and must not have been
 * voided (except for `reopens`, the one void reason the outcome may act on again).
 */
function onLabel(
  event: LabelObservedEvent,
  state: LabelTaskState,
  then: (label: Label) => LabelDecision,
  reopens?: VoidReason,
): LabelDecision {
  const label = labelOf(state, event.attempt);
  if (!label) return reject('LABEL_UNKNOWN', `${event.type} for attempt ${event.attempt}, which has no labels`);
  if (label.status === LabelStatus.voided && label.voidReason !== reopens) {
    return reject('LABEL_VOIDED', `${event.type} for attempt ${event.attempt}, whose labels were voided (${label.voidReason ?? 'unknown'})`);
  }
  return then(label);
}

/**
 * A model's proposal. Kept unless it is for an attempt the task has left (STALE_ATTEMPT), a
 * cancelled task, or another project than the task's. A task label-svc has not heard of yet keeps
 * it too: it is shown once the assignment arrives. It becomes the attempt's labels, submitted by
 * the model (`machineActorId`), only when the policy says so and the attempt accepts labels now,
 * exactly as the assignee's own submission would be: assigned, lease running, nothing submitted.
 */
function receivePrelabel(proposal: PrelabelProposed, state: LabelTaskState, now: Date): LabelDecision {
  const { assignment } = state;
  if (state.cancelled) return reject('TASK_CANCELLED', `proposal ${proposal.id} for a cancelled task`);
  if (assignment && assignment.projectId !== proposal.projectId) return reject('PROJECT_MISMATCH', `proposal ${proposal.id} names project ${proposal.projectId}, the task is in ${assignment.projectId}`);
  if (assignment && proposal.attempt < assignment.attempt) return reject('STALE_ATTEMPT', `proposal for attempt ${proposal.attempt}, superseded by attempt ${assignment.attempt}`);
  if (!autoSubmits(proposal, state, now)) return accept();
  return accept({
    type: 'LabelSubmitted',
    version: 2,
    taskId: proposal.taskId,
    projectId: proposal.projectId,
    attempt: proposal.attempt,
    payload: {
      annotatorId: machineActorId(proposal.model) as AnnotatorId,
      annotations: proposal.annotations.map((a) => ({ label: a.label, confidence: a.confidence })),
      durationMs: null,
      // autoSubmits() holds only for an assigned attempt.
      ...(assignment?.annotatorId ? { heldBy: assignment.annotatorId } : {}),
    },
  });
}

const modelMatches = (policy: PrelabelPolicy, proposal: PrelabelProposed): boolean =>
  policy.model === null || (policy.model.name === proposal.model.name && policy.model.version === proposal.model.version);

function autoSubmits(proposal: PrelabelProposed, state: LabelTaskState, now: Date): boolean {
  const { assignment, prelabelPolicy: policy } = state;
  if (!policy || !policy.autoSubmit || policy.projectId !== proposal.projectId || !modelMatches(policy, proposal)) return false;
  if (!proposal.annotations.every((a) => a.confidence >= policy.minConfidence)) return false;
  if (!assignment || assignment.attempt !== proposal.attempt || assignment.annotatorId === null) return false;
  if (assignment.leaseExpiresAt !== null && now.getTime() >= Date.parse(assignment.leaseExpiresAt)) return false;
  return !labelOf(state, proposal.attempt);
}
