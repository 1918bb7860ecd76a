import type { AnnotatorId, Money, ProjectId, TaskId } from '@labelflow/contracts';
import type { ProjectEvent } from './state';

/** Project side: topup, debit, refund. Annotator side: credit, reversal (of a refunded credit). */
export const LedgerKind = { topup: 'topup', debit: 'debit', credit: 'credit', refund: 'refund', reversal: 'reversal' } as const;
export type LedgerKind = (typeof LedgerKind)[keyof typeof LedgerKind];

export interface LedgerEntry {
  readonly projectId: ProjectId;
  readonly kind: LedgerKind;
  readonly amount: Money;
  readonly taskId: TaskId | null;
  readonly attempt: number | null;
  readonly annotatorId: AnnotatorId | null;
  /** The person whose decision booked it; null: the system (or recorded before actors were). */
  readonly actor: string | null;
}

/** The entries a project's events book: each top-up, by whoever made it. A creation books nothing of its own. */
export const ledgerEntriesOf = (events: readonly ProjectEvent[]): LedgerEntry[] =>
  events.flatMap((e) => (e.type === 'BudgetToppedUp' ? [{ projectId: e.projectId, kind: LedgerKind.topup, amount: e.amount, taskId: null, attempt: null, annotatorId: null, actor: e.actor }] : []));
