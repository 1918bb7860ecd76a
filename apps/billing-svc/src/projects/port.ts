import type { ProjectId, TaskId } from '@labelflow/contracts';
import type { Queryable } from '@labelflow/service-kit';
import type { LedgerEntry } from './ledger';
import { appendLedger, listLedger, loadCurrencies, loadProject, loadProjectsForUpdate, pageLedger, saveBalance, saveBalances, type LedgerRecord } from './repository';
import type { ProjectState } from './state';

export { LedgerListPosition, type LedgerEntry, type LedgerRecord } from './repository';

/** The part of a project that billing decides on. */
export type ProjectBudget = Pick<ProjectState, 'projectId' | 'currency' | 'pricePerTask' | 'machinePricePerTask' | 'balance' | 'version'>;

/**
 * Everything billing/ does with projects/: lock and read a budget, move its balance, book what a
 * billing moved in the ledger and read it back. billing/ imports nothing else of projects/, and
 * projects/ nothing of billing/.
 */
export interface BudgetPort {
  /**
   * Locks the projects' rows in id order and reads their budgets: a consumed batch does it up front,
   * so batches sharing projects queue instead of deadlocking. Missing projects are absent.
   */
  loadAll(tx: Queryable, projectIds: readonly ProjectId[]): Promise<Map<string, ProjectBudget>>;
  /** The project's budget, its row locked until commit; null when there is no such project. */
  load(tx: Queryable, projectId: ProjectId): Promise<ProjectBudget | null>;
  /** Saves the balance billing moved, by compare-and-set on the version it loaded (a lost race throws CONCURRENT_UPDATE). */
  move(tx: Queryable, before: ProjectBudget, after: ProjectBudget): Promise<void>;
  /** Saves the balances a batch moved, one statement: per project, its budget as loaded and as it ended, and how many moves led there. */
  moveAll(tx: Queryable, moves: readonly { readonly before: ProjectBudget; readonly after: ProjectBudget; readonly changes: number }[]): Promise<void>;
  /** Books the entries of a billing: a debit and its credit, or a refund and its reversal. */
  book(tx: Queryable, entries: readonly LedgerEntry[]): Promise<void>;
  /** A task's entries, in booking order. */
  entriesOfTask(db: Queryable, taskId: TaskId): Promise<LedgerRecord[]>;
  /** A page of an annotator's entries, in booking order (`pageLedger`). */
  pageOfAnnotator: typeof pageLedger;
  /** The currency of each of these projects (the currency every amount of its entries is in). */
  currencies: typeof loadCurrencies;
}

const budgetOf = (project: ProjectBudget): ProjectBudget => ({ projectId: project.projectId, currency: project.currency, pricePerTask: project.pricePerTask, machinePricePerTask: project.machinePricePerTask, balance: project.balance, version: project.version });

export const budgets: BudgetPort = {
  async loadAll(tx, projectIds) {
    return new Map((await loadProjectsForUpdate(tx, projectIds)).map((p) => [p.projectId, budgetOf(p)]));
  },
  async load(tx, projectId) {
    const project = await loadProject(tx, projectId, { forUpdate: true });
    return project && budgetOf(project);
  },
  move: (tx, before, after) => saveBalance(tx, after.projectId, after.balance, before.version),
  moveAll: (tx, moves) => saveBalances(tx, moves.map(({ before, after, changes }) => ({ projectId: after.projectId, balance: after.balance, loadedVersion: before.version, changes }))),
  book: appendLedger,
  entriesOfTask: (db, taskId) => listLedger(db, { taskId }),
  pageOfAnnotator: pageLedger,
  currencies: loadCurrencies,
};
