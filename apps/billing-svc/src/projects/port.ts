import type { ProjectId, TaskId } from '@labelflow/contracts';
import type { Queryable } from '@labelflow/service-kit';
import type { LedgerEntry } from './ledger';
import { appendLedger, listLedger, loadProject, lockProjects, pageLedger, saveBalance, type LedgerRecord } from './repository';
import type { ProjectState } from './state';

export { LedgerListPosition, type LedgerEntry, type LedgerRecord } from './repository';

/** The part of a project that billing decides on. */
export type ProjectBudget = Pick<ProjectState, 'projectId' | 'pricePerTask' | 'machinePricePerTask' | 'balance' | 'version'>;

/**
 * Everything billing/ does with projects/: lock and read a budget, move its balance, book what a
 * billing moved in the ledger and read it back. billing/ imports nothing else of projects/, and
 * projects/ nothing of billing/.
 */
export interface BudgetPort {
  /** Locks the projects' rows in id order: a consumed batch does it up front, so batches sharing projects queue instead of deadlocking. */
  lockAll(tx: Queryable, projectIds: readonly ProjectId[]): Promise<void>;
  /** The project's budget, its row locked until commit; null when there is no such project. */
  load(tx: Queryable, projectId: ProjectId): Promise<ProjectBudget | null>;
  /** Saves the balance billing moved, by compare-and-set on the version it loaded (a lost race throws CONCURRENT_UPDATE). */
  move(tx: Queryable, before: ProjectBudget, after: ProjectBudget): Promise<void>;
  /** Books the entries of a billing: a debit and its credit, or a refund and its reversal. */
  book(tx: Queryable, entries: readonly LedgerEntry[]): Promise<void>;
  /** A task's entries, in booking order. */
  entriesOfTask(db: Queryable, taskId: TaskId): Promise<LedgerRecord[]>;
  /** A page of an annotator's entries, in booking order (`pageLedger`). */
  pageOfAnnotator: typeof pageLedger;
}

export const budgets: BudgetPort = {
  lockAll: lockProjects,
  async load(tx, projectId) {
    const project = await loadProject(tx, projectId, { forUpdate: true });
    return project && { projectId: project.projectId, pricePerTask: project.pricePerTask, machinePricePerTask: project.machinePricePerTask, balance: project.balance, version: project.version };
  },
  move: (tx, before, after) => saveBalance(tx, after.projectId, after.balance, before.version),
  book: appendLedger,
  entriesOfTask: (db, taskId) => listLedger(db, { taskId }),
  pageOfAnnotator: pageLedger,
};
