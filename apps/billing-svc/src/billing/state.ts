import { isMachineActor, type AnnotatorId, type BillingEvent, type BillingFailureReason, type Money, type ProjectId, type TaskCancelled, type TaskId, type TaskReopened } from '@labelflow/contracts';
import type { EventDraft } from '@labelflow/service-kit';

export { MAX_AMOUNT } from '@labelflow/contracts';

export const BillingStatus = { completed: 'completed', failed: 'failed', refunded: 'refunded' } as const;
export type BillingStatus = (typeof BillingStatus)[keyof typeof BillingStatus];

/** The part of a project that billing decides on, as projects/port.ts hands it over. */
export interface ProjectBudget {
  readonly projectId: ProjectId;
  /** ISO 4217 code of every amount of the project: its prices, its balance, and the payouts it credits. */
  readonly currency: string;
  readonly pricePerTask: Money;
  /** The price of a task whose approved labels a model submitted. */
  readonly machinePricePerTask: Money;
  readonly balance: Money;
  /** Optimistic concurrency: bumped on every balance change, checked by compare-and-set. */
  readonly version: number;
}

/** The outcome of billing one attempt of a task: a failed one may be retried, a completed one refunded. */
export interface AttemptBilling {
  readonly taskId: TaskId;
  readonly attempt: number;
  readonly projectId: ProjectId;
  readonly annotatorId: AnnotatorId;
  readonly status: BillingStatus;
  readonly amount: Money;
  readonly reason: string | null;
  /** The reviewer whose approval this billing pays for (null for billings recorded before it was kept). */
  readonly approvedBy: string | null;
  /** Who undid it, while the refund is being booked (not stored: the ledger entry keeps it). */
  readonly refundedBy?: string | null;
}

/**
 * Everything billing knows of one task. `cancelled` and `latestAttempt` are tombstones: they are
 * recorded even when they arrive before the approval they compensate (another topic), so a late
 * QaPassed for a cancelled task or a superseded attempt is never billed.
 */
export interface BillingTaskState {
  readonly taskId: TaskId;
  readonly project: ProjectBudget | null;
  readonly billings: readonly AttemptBilling[];
  readonly cancelled: boolean;
  readonly latestAttempt: number;
  /**
   * Payout balances, by annotator, in the currency of the task's project, of everyone this task's
   * billing may credit or reverse (the approved annotator and those of its billed attempts), as
   * loaded and as the transitions move them. An annotator missing here has no payout yet (0). An
   * annotator paid in several currencies holds one payout per currency; amounts never mix.
   */
  readonly payouts: Readonly<Record<string, Money>>;
}

export type BillingStateEvent = EventDraft<BillingEvent | TaskCancelled | TaskReopened>;

export const emptyBilling = (taskId: TaskId, project: ProjectBudget | null = null, payouts: Readonly<Record<string, Money>> = {}): BillingTaskState => ({
  taskId,
  project,
  billings: [],
  cancelled: false,
  latestAttempt: 1,
  payouts,
});
/**
 * The machine rule: an annotator id of the form `model.<name>@<version>` is a model (label-svc
 * submits under it, and refuses it to people). Nobody is paid for its labels: the project is
 * charged its machine price, and no payout row is created or moved.
 */
export const isMachine = (annotatorId: string): boolean => isMachineActor(annotatorId);

/** What one approved attempt costs the project: the machine price for a model's labels, the task price otherwise. */
export const priceFor = (project: ProjectBudget, annotatorId: string): Money => (isMachine(annotatorId) ? project.machinePricePerTask : project.pricePerTask);

const movePayoutOf = (state: BillingTaskState, annotatorId: AnnotatorId, delta: number): BillingTaskState['payouts'] => (isMachine(annotatorId) ? state.payouts : movePayout(state, annotatorId, delta));

export const payoutOf = (state: BillingTaskState, annotatorId: AnnotatorId): Money => state.payouts[annotatorId] ?? 0;

export const billingOf = (state: BillingTaskState, attempt: number): AttemptBilling | undefined => state.billings.find((b) => b.attempt === attempt);

const upsert = (state: BillingTaskState, billing: AttemptBilling): BillingTaskState => ({
  ...state,
  billings: [...state.billings.filter((b) => b.attempt !== billing.attempt), billing].sort((a, b) => a.attempt - b.attempt),
});

const moveBalance = (project: ProjectBudget | null, delta: number): ProjectBudget | null => project && { ...project, balance: project.balance + delta };
const movePayout = (state: BillingTaskState, annotatorId: AnnotatorId, delta: number): BillingTaskState['payouts'] => ({ ...state.payouts, [annotatorId]: payoutOf(state, annotatorId) + delta });

export function evolve(state: BillingTaskState, event: BillingStateEvent): BillingTaskState {
  const { taskId, attempt, projectId } = event;
  switch (event.type) {
    case 'BillingCompleted': {
      const { annotatorId, amount } = event.payload;
      const billed = upsert(state, { taskId, attempt, projectId, annotatorId, status: BillingStatus.completed, amount, reason: null, approvedBy: event.payload.approvedBy ?? billingOf(state, attempt)?.approvedBy ?? null });
      return { ...billed, project: moveBalance(state.project, -amount), payouts: movePayoutOf(state, annotatorId, amount) };
    }
    case 'BillingFailed': {
      // Record what the attempt would have cost, so a failed row explains the shortfall.
      const amount = state.project ? priceFor(state.project, event.payload.annotatorId) : 0;
      const reason: BillingFailureReason = event.payload.reason;
      return upsert(state, { taskId, attempt, projectId, annotatorId: event.payload.annotatorId, status: BillingStatus.failed, amount, reason, approvedBy: event.payload.approvedBy ?? null });
    }
    case 'BillingRefunded': {
      const billing = billingOf(state, attempt);
      if (!billing) return state;
      const refunded = upsert(state, { ...billing, status: BillingStatus.refunded, reason: event.payload.reason, refundedBy: event.payload.refundedBy ?? null });
      return { ...refunded, project: moveBalance(state.project, event.payload.amount), payouts: movePayoutOf(state, billing.annotatorId, -event.payload.amount) };
    }
    case 'TaskCancelled':
      return state.cancelled ? state : { ...state, cancelled: true };
    case 'TaskReopened':
      return event.attempt > state.latestAttempt ? { ...state, latestAttempt: event.attempt } : state;
    default: {
      const unhandled: never = event;
      return unhandled;
    }
  }
}
