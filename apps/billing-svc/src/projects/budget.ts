import type { Money, ProjectId, Result } from '@labelflow/contracts';
import { MAX_AMOUNT } from '../billing/state';
import type { LedgerEntry } from './repository';

export const ProjectRejections = { BUDGET_OVERFLOW: 'BUDGET_OVERFLOW' } as const;
export type ProjectRejection = { readonly code: (typeof ProjectRejections)[keyof typeof ProjectRejections]; readonly message: string };

/** The ledger of a new project: its initial budget as a top-up, or nothing for an empty budget. */
export const openingLedger = (projectId: ProjectId, budget: Money, actor: string): LedgerEntry[] => (budget > 0 ? [topUpEntry(projectId, budget, actor)] : []);

/** Money added by `actor` (the authenticated caller). */
export const topUpEntry = (projectId: ProjectId, amount: Money, actor: string): LedgerEntry => ({ projectId, kind: 'topup', amount, taskId: null, attempt: null, annotatorId: null, actor });

/**
 * The balance after a top-up. Beyond 2^53 - 1 cents a balance would no longer be an exact number,
 * and the database refuses it. `outstanding` is what the project has been debited and not refunded:
 * a cancellation or a reopen gives it back, and billing-svc's consumer cannot refuse that refund, so
 * the room for it is kept here. A top-up may raise the balance only as far as every outstanding
 * debit could still be refunded into it without passing the limit.
 */
export function topUp(project: { readonly balance: Money; readonly outstanding: Money }, amount: Money): Result<Money, ProjectRejection> {
  const { balance, outstanding } = project;
  if (amount > MAX_AMOUNT - balance - outstanding) {
    return {
      ok: false,
      reason: {
        code: 'BUDGET_OVERFLOW',
        message: `a balance of ${balance}, plus ${outstanding} billed that refunds may return, plus ${amount} exceeds the largest amount, ${MAX_AMOUNT}`,
      },
    };
  }
  return { ok: true, value: balance + amount };
}
