import type { Money, ProjectId, Result } from '@labelflow/contracts';
import type { LedgerEntry } from './repository';

export const ProjectRejections = { BUDGET_OVERFLOW: 'BUDGET_OVERFLOW' } as const;
export type ProjectRejection = { readonly code: (typeof ProjectRejections)[keyof typeof ProjectRejections]; readonly message: string };

/** The ledger of a new project: its initial budget as a top-up, or nothing for an empty budget. */
export const openingLedger = (projectId: ProjectId, budget: Money): LedgerEntry[] => (budget > 0 ? [topUpEntry(projectId, budget)] : []);

export const topUpEntry = (projectId: ProjectId, amount: Money): LedgerEntry => ({ projectId, kind: 'topup', amount, taskId: null, attempt: null, annotatorId: null });

/** The balance after a top-up; beyond 2^53 cents a balance would no longer be an exact number. */
export function topUp(balance: Money, amount: Money): Result<Money, ProjectRejection> {
  const next = balance + amount;
  if (!Number.isSafeInteger(next)) return { ok: false, reason: { code: 'BUDGET_OVERFLOW', message: `a balance of ${balance} plus ${amount} exceeds the largest amount` } };
  return { ok: true, value: next };
}
