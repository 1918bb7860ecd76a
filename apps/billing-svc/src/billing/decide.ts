import { ActorName, type AnnotatorId, type BillingCompleted, type BillingEvent, type BillingFailed, type BillingFailureReason, type BillingRefunded, type QaPassed, type TaskCancelled, type TaskId, type TaskReopened } from '@labelflow/contracts';
import type { Decision, EventDraft, Rejection } from '@labelflow/service-kit';
import { billingOf, BillingStatus, evolve, isMachine, MAX_AMOUNT, payoutOf, priceFor, type AttemptBilling, type BillingTaskState } from './state';

export type BillingCommand =
  /** QA approved an attempt. */
  | { readonly type: 'BillTask'; readonly event: EventDraft<QaPassed> }
  /** An admin retries the failed billing of the task's latest attempt (after a top-up). */
  | { readonly type: 'RetryBilling'; readonly taskId: TaskId }
  | { readonly type: 'Observe'; readonly event: EventDraft<TaskCancelled | TaskReopened> };

/**
 * Failures injected from outside (tests, and the producer's billing failures): the annotators whose
 * billing fails with INJECTED_FAILURE, whatever the budget. A port, so a decision stays pure.
 */
export interface BillingFaults {
  billingFails(annotatorId: AnnotatorId): boolean;
}
export const noFaults: BillingFaults = { billingFails: () => false };
export interface BillingDeciderDeps {
  readonly faults: BillingFaults;
}

export const BillingRejections = {
  ALREADY_BILLED: 'ALREADY_BILLED',
  TASK_CANCELLED: 'TASK_CANCELLED',
  ATTEMPT_SUPERSEDED: 'ATTEMPT_SUPERSEDED',
  NOTHING_TO_RETRY: 'NOTHING_TO_RETRY',
  INSUFFICIENT_BUDGET: 'INSUFFICIENT_BUDGET',
  PROJECT_NOT_FOUND: 'PROJECT_NOT_FOUND',
  INJECTED_FAILURE: 'INJECTED_FAILURE',
  PAYOUT_LIMIT_EXCEEDED: 'PAYOUT_LIMIT_EXCEEDED',
  PROJECT_MISMATCH: 'PROJECT_MISMATCH',
} as const;
export type BillingRejection = Rejection<(typeof BillingRejections)[keyof typeof BillingRejections]>;
export type BillingDecision = Decision<EventDraft<BillingEvent>, BillingRejection>;

const accept = (...events: EventDraft<BillingEvent>[]): BillingDecision => ({ ok: true, events });
const reject = (code: BillingRejection['code'], message: string): BillingDecision => ({ ok: false, reason: { code, message } });

/** Billing's decider: pure, given the faults it is told to inject. */
export const billingDecider = (deps: BillingDeciderDeps) => ({ decide: (command: BillingCommand, state: BillingTaskState) => decide(command, state, deps), evolve });

export function decide(command: BillingCommand, state: BillingTaskState, { faults }: BillingDeciderDeps): BillingDecision {
  switch (command.type) {
    case 'BillTask':
      return billTask(command.event, faults, state);
    case 'RetryBilling':
      return retry(faults, state);
    case 'Observe':
      return observe(command.event, state);
    default: {
      const unhandled: never = command;
      return unhandled;
    }
  }
}

function observe(event: EventDraft<TaskCancelled | TaskReopened>, state: BillingTaskState): BillingDecision {
  switch (event.type) {
    case 'TaskCancelled':
      return refundAll(event, state);
    case 'TaskReopened':
      return refundSuperseded(event, state);
    default: {
      const unhandled: never = event;
      return unhandled;
    }
  }
}

type Charge = { readonly ok: true } | { readonly ok: false; readonly reason: BillingFailureReason; readonly detail: string };

/**
 * Whether the project can pay `annotatorId` for one more task now. Every limit the booking would
 * hit in the database is checked here, so that reaching one is a BillingFailed the other services
 * compensate, never a CHECK violation that dead-letters the approval and strands the saga:
 * - the project's balance stays >= 0 (the debit);
 * - the annotator's payout stays <= 2^53 - 1 (the credit).
 * A refund cannot pass a limit: it returns to the project what a debit took (top-ups keep room for
 * every outstanding debit, `projects/decide.ts`), and it reverses a credit still in the payout.
 */
function chargeable(state: BillingTaskState, annotatorId: AnnotatorId, faults: BillingFaults): Charge {
  const { project, taskId } = state;
  if (faults.billingFails(annotatorId)) return { ok: false, reason: 'INJECTED_FAILURE', detail: `billing of task ${taskId} failed by fault injection` };
  if (!project) return { ok: false, reason: 'PROJECT_NOT_FOUND', detail: `the task's project does not exist` };
  const price = priceFor(project, annotatorId);
  if (project.balance < price) {
    return { ok: false, reason: 'INSUFFICIENT_BUDGET', detail: `project ${project.projectId} has ${project.balance} cents left; a task costs ${price}` };
  }
  // A model is paid nothing, so it has no payout to overflow.
  if (isMachine(annotatorId)) return { ok: true };
  const payout = payoutOf(state, annotatorId);
  if (payout > MAX_AMOUNT - price) {
    return {
      ok: false,
      reason: 'PAYOUT_LIMIT_EXCEEDED',
      detail: `annotator ${annotatorId} holds ${payout} (${project.currency}) in payouts; ${price} more would pass the largest amount, ${MAX_AMOUNT}`,
    };
  }
  return { ok: true };
}

function billTask(event: EventDraft<QaPassed>, faults: BillingFaults, state: BillingTaskState): BillingDecision {
  if (state.cancelled) return reject('TASK_CANCELLED', `task ${event.taskId} was cancelled before its approval arrived`);
  // A task's money moves in one project: its billings', once it has any. An approval naming another
  // would charge one balance and book the ledger on the other.
  if (state.project && state.project.projectId !== event.projectId) {
    return reject('PROJECT_MISMATCH', `the approval of task ${event.taskId} names project ${event.projectId}; the task is billed in ${state.project.projectId}`);
  }
  // A billing of a newer attempt proves the reopen as well as a TaskReopened does: an approval of
  // an older attempt that arrives after it (a dead letter replayed, a topic rewound) is stale.
  const newest = Math.max(state.latestAttempt, ...state.billings.map((b) => b.attempt));
  if (event.attempt < newest) return reject('ATTEMPT_SUPERSEDED', `attempt ${event.attempt} was superseded by attempt ${newest}`);
  // One approval bills once. A failed billing is completed only by an admin's retry, never by the
  // same approval read again once the inbox has forgotten it (a replay months later).
  const billed = billingOf(state, event.attempt);
  if (billed) {
    const hint = billed.status === BillingStatus.failed ? '; retry it with POST /tasks/:taskId/billing/retry' : '';
    return reject('ALREADY_BILLED', `task ${event.taskId} attempt ${event.attempt} is already ${billed.status}${hint}`);
  }
  // An approval of a newer attempt proves the reopen that task-events may not have brought yet.
  // Older billed attempts are refunded first, so the new one is charged against a budget that no
  // longer holds their debit; the TaskReopened that follows then finds nothing left to refund.
  const superseded = state.billings.filter((b) => b.status === BillingStatus.completed && b.attempt < event.attempt).map((b) => refund(b, 'ATTEMPT_SUPERSEDED'));
  const current = superseded.reduce(evolve, state);
  const charge = chargeable(current, event.payload.annotatorId, faults);
  const base = { version: 1, taskId: event.taskId, projectId: event.projectId, attempt: event.attempt } as const;
  if (!charge.ok) {
    const failed: EventDraft<BillingFailed> = { ...base, type: 'BillingFailed', payload: { annotatorId: event.payload.annotatorId, reason: charge.reason, detail: charge.detail, approvedBy: event.payload.reviewerId } };
    return accept(...superseded, failed);
  }
  const completed: EventDraft<BillingCompleted> = { ...base, type: 'BillingCompleted', payload: { annotatorId: event.payload.annotatorId, amount: current.project ? priceFor(current.project, event.payload.annotatorId) : 0, approvedBy: event.payload.reviewerId } };
  return accept(...superseded, completed);
}

function retry(faults: BillingFaults, state: BillingTaskState): BillingDecision {
  if (state.cancelled) return reject('TASK_CANCELLED', `task ${state.taskId} was cancelled`);
  const latest = state.billings[state.billings.length - 1];
  if (!latest || latest.status !== BillingStatus.failed) return reject('NOTHING_TO_RETRY', `task ${state.taskId} has no failed billing to retry`);
  if (latest.attempt < state.latestAttempt) return reject('ATTEMPT_SUPERSEDED', `attempt ${latest.attempt} was superseded by attempt ${state.latestAttempt}`);
  const charge = chargeable(state, latest.annotatorId, faults);
  // A retry that still cannot pay changes nothing: the task stays failed, the admin is told why.
  if (!charge.ok) return reject(charge.reason, charge.detail);
  return accept({
    type: 'BillingCompleted',
    version: 1,
    taskId: latest.taskId,
    projectId: latest.projectId,
    attempt: latest.attempt,
    payload: { annotatorId: latest.annotatorId, amount: state.project ? priceFor(state.project, latest.annotatorId) : latest.amount, ...(latest.approvedBy ? { approvedBy: latest.approvedBy } : {}) },
  });
}

const refund = (billing: AttemptBilling, reason: BillingRefunded['payload']['reason'], refundedBy?: string): EventDraft<BillingRefunded> => ({
  type: 'BillingRefunded',
  version: 1,
  taskId: billing.taskId,
  projectId: billing.projectId,
  attempt: billing.attempt,
  payload: { annotatorId: billing.annotatorId, amount: billing.amount, reason, ...(refundedBy ? { refundedBy } : {}) },
});

/**
 * A cancelled task keeps nothing billed: every completed attempt is refunded. TaskCancelled's
 * `cancelledBy` is free text in its contract, `refundedBy` an actor name: one that is not a name
 * is left out rather than let the refund fail its schema and be dead-lettered.
 */
function refundAll(event: EventDraft<TaskCancelled>, state: BillingTaskState): BillingDecision {
  const by = ActorName.safeParse(event.payload.cancelledBy);
  return accept(...state.billings.filter((b) => b.status === BillingStatus.completed).map((b) => refund(b, 'TASK_CANCELLED', by.success ? by.data : undefined)));
}

/** A billed attempt that a newer attempt replaced (a race between a reopen and an approval) is refunded. */
function refundSuperseded(event: EventDraft<TaskReopened>, state: BillingTaskState): BillingDecision {
  return accept(...state.billings.filter((b) => b.status === BillingStatus.completed && b.attempt < event.attempt).map((b) => refund(b, 'ATTEMPT_SUPERSEDED')));
}
