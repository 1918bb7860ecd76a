import type { Money, ProjectId } from '@labelflow/contracts';
import type { Decision, Rejection } from '@labelflow/service-kit';
import { MAX_AMOUNT, outstanding, type ProjectEvent, type ProjectState } from './state';

export type ProjectCommand =
  /** A platform admin opens a project; a positive initial budget is its first top-up, by the same person. */
  | {
      readonly type: 'CreateProject';
      readonly projectId: ProjectId;
      readonly name: string;
      readonly currency: string;
      readonly pricePerTask: Money;
      readonly machinePricePerTask: Money;
      readonly budget: Money;
      readonly actor: string;
    }
  /** An owner (or a platform admin) adds money to the budget. */
  | { readonly type: 'TopUp'; readonly projectId: ProjectId; readonly amount: Money; readonly actor: string };

export const ProjectRejections = { PROJECT_EXISTS: 'PROJECT_EXISTS', PROJECT_NOT_FOUND: 'PROJECT_NOT_FOUND', BUDGET_OVERFLOW: 'BUDGET_OVERFLOW' } as const;
export type ProjectRejection = Rejection<(typeof ProjectRejections)[keyof typeof ProjectRejections]>;
export type ProjectDecision = Decision<ProjectEvent, ProjectRejection>;

const accept = (...events: ProjectEvent[]): ProjectDecision => ({ ok: true, events });
const reject = (code: ProjectRejection['code'], message: string): ProjectDecision => ({ ok: false, reason: { code, message } });

export function decide(command: ProjectCommand, state: ProjectState | null): ProjectDecision {
  switch (command.type) {
    case 'CreateProject': {
      if (state) return reject('PROJECT_EXISTS', `project ${command.projectId} already exists`);
      const { projectId, name, currency, pricePerTask, machinePricePerTask, budget, actor } = command;
      const created: ProjectEvent = { type: 'ProjectCreated', projectId, name, currency, pricePerTask, machinePricePerTask };
      // An empty budget books nothing: the ledger holds only money that moved.
      return budget > 0 ? accept(created, { type: 'BudgetToppedUp', projectId, amount: budget, actor }) : accept(created);
    }
    case 'TopUp':
      return topUp(command, state);
    default: {
      const unhandled: never = command;
      return unhandled;
    }
  }
}

/**
 * Beyond 2^53 - 1 cents a balance would no longer be an exact number, and the database refuses it.
 * What is outstanding (debited and not refunded) may come back: a cancellation or a reopen refunds
 * it, and billing-svc's consumer cannot refuse that refund, so the room for it is kept here. A
 * top-up may raise the balance only as far as every outstanding debit could still be refunded into
 * it without passing the limit.
 */
function topUp(command: Extract<ProjectCommand, { type: 'TopUp' }>, state: ProjectState | null): ProjectDecision {
  if (!state) return reject('PROJECT_NOT_FOUND', `project ${command.projectId} does not exist`);
  const { balance } = state;
  const owed = outstanding(state);
  if (command.amount > MAX_AMOUNT - balance - owed) {
    return reject('BUDGET_OVERFLOW', `a balance of ${balance}, plus ${owed} billed that refunds may return, plus ${command.amount} exceeds the largest amount, ${MAX_AMOUNT}`);
  }
  return accept({ type: 'BudgetToppedUp', projectId: state.projectId, amount: command.amount, actor: command.actor });
}
