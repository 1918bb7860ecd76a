import type { Money, ProjectId } from '@labelflow/contracts';

export { MAX_AMOUNT } from '@labelflow/contracts';

/** What the ledger holds for a project: money added by top-ups, billed by debits, given back by refunds. */
export interface ProjectTotals {
  readonly toppedUp: Money;
  readonly debited: Money;
  readonly refunded: Money;
}

/** A project as its commands see it: the budget billing draws on, its price, and the ledger's totals. */
export interface ProjectState {
  readonly projectId: ProjectId;
  readonly name: string;
  readonly currency: string;
  readonly pricePerTask: Money;
  /** What a task labelled by a model (a machine annotator) costs: no annotator is paid for it. */
  readonly machinePricePerTask: Money;
  readonly balance: Money;
  readonly totals: ProjectTotals;
  /** Optimistic concurrency: bumped on every balance change, checked by compare-and-set. */
  readonly version: number;
}

/**
 * What happens to a project. Kept by billing-svc alone (its row and its ledger), never published:
 * no other service needs a budget. `actor` is the person whose request moved the money.
 */
export type ProjectEvent =
  | { readonly type: 'ProjectCreated'; readonly projectId: ProjectId; readonly name: string; readonly currency: string; readonly pricePerTask: Money; readonly machinePricePerTask: Money }
  | { readonly type: 'BudgetToppedUp'; readonly projectId: ProjectId; readonly amount: Money; readonly actor: string };

/** Billed and not refunded: what cancellations and reopens may still return to the balance. */
export const outstanding = (state: ProjectState): Money => state.totals.debited - state.totals.refunded;

export function evolve(state: ProjectState | null, event: ProjectEvent): ProjectState | null {
  switch (event.type) {
    case 'ProjectCreated': {
      if (state) return state;
      const { projectId, name, currency, pricePerTask, machinePricePerTask } = event;
      return { projectId, name, currency, pricePerTask, machinePricePerTask, balance: 0, totals: { toppedUp: 0, debited: 0, refunded: 0 }, version: 0 };
    }
    case 'BudgetToppedUp':
      if (!state) return state;
      return { ...state, balance: state.balance + event.amount, totals: { ...state.totals, toppedUp: state.totals.toppedUp + event.amount } };
    default: {
      const unhandled: never = event;
      return unhandled;
    }
  }
}
