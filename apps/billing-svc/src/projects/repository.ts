import type { AnnotatorId, Money, ProjectId, TaskId } from '@labelflow/contracts';
import { z } from 'zod';
import { keysetPage, pgArray, ServiceKitError, ServiceKitErrors, type Queryable } from '@labelflow/service-kit';
import type { LedgerEntry, LedgerKind } from './ledger';
import type { ProjectState, ProjectTotals } from './state';

export { LedgerKind, type LedgerEntry } from './ledger';
export type LedgerRecord = LedgerEntry & { readonly id: string; readonly createdAt: Date };

export type ProjectRecord = Omit<ProjectState, 'totals'> & { readonly createdAt: Date };
export type ProjectSummary = ProjectRecord & { readonly totalToppedUp: Money; readonly totalDebited: Money; readonly totalRefunded: Money };

interface ProjectRow {
  project_id: string;
  name: string;
  currency: string;
  price_per_task: string;
  machine_price_per_task: string;
  balance: string;
  /** bigint: one step per balance change, which a busy project makes billions of over its life. */
  version: string;
  created_at: Date;
}
/** A project's totals, summed from its ledger (`totalsColumns`). */
interface TotalsRow {
  total_topped_up: string;
  total_debited: string;
  total_refunded: string;
}

interface LedgerRow {
  id: string;
  project_id: string;
  task_id: string | null;
  attempt: number | null;
  kind: string;
  annotator_id: string | null;
  amount: string;
  actor: string | null;
  created_at: Date;
}

// pg returns bigint as a string; every money column is capped at 2^53 - 1, so Number is exact.
const toProject = (r: ProjectRow): ProjectRecord => ({
  projectId: r.project_id as ProjectId,
  name: r.name,
  currency: r.currency,
  pricePerTask: Number(r.price_per_task),
  machinePricePerTask: Number(r.machine_price_per_task),
  balance: Number(r.balance),
  version: Number(r.version),
  createdAt: r.created_at,
});

const toLedger = (r: LedgerRow): LedgerRecord => ({
  id: r.id,
  projectId: r.project_id as ProjectId,
  taskId: r.task_id as TaskId | null,
  attempt: r.attempt,
  kind: r.kind as LedgerKind,
  annotatorId: r.annotator_id as AnnotatorId | null,
  amount: Number(r.amount),
  actor: r.actor,
  createdAt: r.created_at,
});

export async function insertProject(db: Queryable, p: Omit<ProjectRecord, 'version' | 'createdAt'>): Promise<void> {
  await db.query(
    `INSERT INTO projects (project_id, name, currency, price_per_task, machine_price_per_task, balance, version) VALUES ($1, $2, $3, $4, $5, $6, 1)`,
    [p.projectId, p.name, p.currency, p.pricePerTask, p.machinePricePerTask, p.balance],
  );
}

/** `forUpdate` holds the row until commit, so balance changes on one project apply one at a time. */
export async function loadProject(db: Queryable, projectId: ProjectId, { forUpdate = false } = {}): Promise<ProjectRecord | null> {
  const { rows } = await db.query<ProjectRow>(`SELECT * FROM projects WHERE project_id = $1${forUpdate ? ' FOR UPDATE' : ''}`, [projectId]);
  return rows[0] ? toProject(rows[0]) : null;
}

const totalsColumns = `COALESCE(SUM(l.amount) FILTER (WHERE l.kind = 'topup'), 0) AS total_topped_up,
  COALESCE(SUM(l.amount) FILTER (WHERE l.kind = 'debit'), 0) AS total_debited,
  COALESCE(SUM(l.amount) FILTER (WHERE l.kind = 'refund'), 0) AS total_refunded`;
const toTotals = (r: TotalsRow): ProjectTotals => ({ toppedUp: Number(r.total_topped_up), debited: Number(r.total_debited), refunded: Number(r.total_refunded) });

/** One statement, so the balance and the totals come from the same snapshot. */
export async function loadProjectSummary(db: Queryable, projectId: ProjectId): Promise<ProjectSummary | null> {
  const { rows } = await db.query<ProjectRow & TotalsRow>(
    `SELECT p.*, ${totalsColumns} FROM projects p LEFT JOIN ledger l ON l.project_id = p.project_id WHERE p.project_id = $1 GROUP BY p.project_id`,
    [projectId],
  );
  const row = rows[0];
  if (!row) return null;
  const totals = toTotals(row);
  return { ...toProject(row), totalToppedUp: totals.toppedUp, totalDebited: totals.debited, totalRefunded: totals.refunded };
}

/**
 * A project's state for its commands. Its row is locked first and the totals read by a second
 * statement, whose snapshot (READ COMMITTED) then holds every booking committed before the lock was
 * granted: no debit or refund can change them until this transaction ends.
 */
export async function loadProjectState(tx: Queryable, projectId: ProjectId): Promise<ProjectState | null> {
  const project = await loadProject(tx, projectId, { forUpdate: true });
  if (!project) return null;
  // An aggregate without GROUP BY answers exactly one row, with zeros for a project without entries.
  const { rows: [totals] } = await tx.query<TotalsRow>(`SELECT ${totalsColumns} FROM ledger l WHERE l.project_id = $1`, [projectId]);
  const { createdAt: _, ...state } = project;
  return { ...state, totals: totals ? toTotals(totals) : { toppedUp: 0, debited: 0, refunded: 0 } };
}

/** Saves a project's state: a new project is inserted, a known one's balance moved by compare-and-set. */
export async function saveProject(tx: Queryable, previous: ProjectState | null, next: ProjectState | null): Promise<void> {
  if (!next) return;
  if (!previous) return insertProject(tx, next);
  if (next.balance !== previous.balance) await saveBalance(tx, next.projectId, next.balance, previous.version);
}

/** Compare-and-set on `version`; losing the race is a retriable conflict (consumer retries, HTTP 409). */
export async function saveBalance(db: Queryable, projectId: ProjectId, balance: Money, previousVersion: number): Promise<void> {
  const result = await db.query('UPDATE projects SET balance = $2, version = version + 1 WHERE project_id = $1 AND version = $3', [projectId, balance, previousVersion]);
  if (result.rowCount !== 1) {
    throw new ServiceKitError(ServiceKitErrors.CONCURRENT_UPDATE, `project ${projectId} changed concurrently`, { retriable: true });
  }
}

/** Appends the entries in one statement, in order (ids follow it). */
export async function appendLedger(db: Queryable, entries: readonly LedgerEntry[]): Promise<void> {
  if (entries.length === 0) return;
  await db.query(
    `INSERT INTO ledger (project_id, task_id, attempt, kind, annotator_id, amount, actor)
     SELECT e.project_id, e.task_id, e.attempt, e.kind, e.annotator_id, e.amount, e.actor
     FROM ROWS FROM (jsonb_to_recordset($1::jsonb) AS (project_id uuid, task_id text, attempt int, kind text, annotator_id text, amount bigint, actor text)) WITH ORDINALITY AS e(project_id, task_id, attempt, kind, annotator_id, amount, actor, n)
     ORDER BY e.n`,
    [JSON.stringify(entries.map((e) => ({ project_id: e.projectId, task_id: e.taskId, attempt: e.attempt, kind: e.kind, annotator_id: e.annotatorId, amount: e.amount, actor: e.actor })))],
  );
}

/** The currency of each project that exists among `projectIds`, unlocked: what a page of ledger entries is in. */
export async function loadCurrencies(db: Queryable, projectIds: readonly string[]): Promise<Map<string, string>> {
  if (projectIds.length === 0) return new Map();
  const { rows } = await db.query<{ project_id: string; currency: string }>('SELECT project_id, currency FROM projects WHERE project_id = ANY($1::uuid[])', [pgArray([...new Set(projectIds)])]);
  return new Map(rows.map((r) => [r.project_id, r.currency]));
}

/** Locks the projects' rows in id order and reads them: a consumed batch's budgets, one statement. */
export async function loadProjectsForUpdate(tx: Queryable, projectIds: readonly ProjectId[]): Promise<ProjectRecord[]> {
  if (projectIds.length === 0) return [];
  const { rows } = await tx.query<ProjectRow>('SELECT * FROM projects WHERE project_id = ANY($1::uuid[]) ORDER BY project_id FOR UPDATE', [pgArray(projectIds)]);
  return rows.map(toProject);
}

/**
 * Saves several projects' balances in one statement, each by compare-and-set on the version it was
 * loaded with, bumped by the number of balance changes it saw (as one saveBalance per change would).
 */
export async function saveBalances(db: Queryable, moves: readonly { readonly projectId: ProjectId; readonly balance: Money; readonly loadedVersion: number; readonly changes: number }[]): Promise<void> {
  if (moves.length === 0) return;
  const result = await db.query(
    `UPDATE projects p SET balance = u.balance, version = p.version + u.changes
     FROM unnest($1::uuid[], $2::bigint[], $3::bigint[], $4::int[]) AS u(project_id, balance, loaded_version, changes)
     WHERE p.project_id = ANY($1::uuid[]) AND p.project_id = u.project_id AND p.version = u.loaded_version`,
    [pgArray(moves.map((m) => m.projectId)), pgArray(moves.map((m) => m.balance)), pgArray(moves.map((m) => m.loadedVersion)), pgArray(moves.map((m) => m.changes))],
  );
  if (result.rowCount !== moves.length) {
    throw new ServiceKitError(ServiceKitErrors.CONCURRENT_UPDATE, `a project of ${moves.map((m) => m.projectId).join(', ')} changed concurrently`, { retriable: true });
  }
}

export async function listLedger(db: Queryable, filter: { taskId?: TaskId; annotatorId?: AnnotatorId; kind?: LedgerKind }): Promise<LedgerRecord[]> {
  const { rows } = await db.query<LedgerRow>(
    `SELECT * FROM ledger WHERE ($1::text IS NULL OR task_id = $1) AND ($2::text IS NULL OR annotator_id = $2)
       AND ($3::text IS NULL OR kind = $3) ORDER BY id`,
    [filter.taskId ?? null, filter.annotatorId ?? null, filter.kind ?? null],
  );
  return rows.map(toLedger);
}

const MAX_BIGINT = 2n ** 63n - 1n;

/** Where a page of `pageLedger` ends: a ledger id (bigserial, so a decimal string). */
// The refinement runs even when the pattern failed (zod 4): it must not throw on what the pattern refused.
export const LedgerListPosition = z.object({ afterId: z.string().regex(/^[1-9]\d{0,18}$/).refine((id) => /^[1-9]\d{0,18}$/.test(id) && BigInt(id) <= MAX_BIGINT) });
export type LedgerListPosition = z.infer<typeof LedgerListPosition>;

export interface LedgerPageFilter {
  readonly annotatorId: string;
  readonly kind?: LedgerKind;
  /** Only entries of these projects (a manager's); an empty list matches nothing. Every project when left out. */
  readonly projectIds?: readonly string[] | 'all';
  readonly limit: number;
  /** The `next.afterId` of the previous page: entries with a greater id. */
  readonly afterId?: string | number;
}

/**
 * A page of an annotator's ledger entries in id (booking) order; `next` is null exactly when no
 * entry follows the page. Reads ledger_annotator in id order; with a project filter, each project's
 * range of ledger_annotator_project (at most limit + 1 entries) is read and the ranges merged, where
 * `project_id = ANY(...)` would read and sort every entry the annotator has in those projects.
 */
export async function pageLedger(db: Queryable, filter: LedgerPageFilter): Promise<{ items: LedgerRecord[]; next: LedgerListPosition | null }> {
  const projectIds = filter.projectIds === 'all' ? undefined : filter.projectIds;
  if (projectIds?.length === 0) return { items: [], next: null };
  const values: unknown[] = [];
  const param = (value: unknown): string => `$${values.push(value)}`;
  const where = [`ledger.annotator_id = ${param(filter.annotatorId)}`];
  if (filter.kind !== undefined) where.push(`ledger.kind = ${param(filter.kind)}`);
  if (filter.afterId !== undefined) where.push(`ledger.id > ${param(String(filter.afterId))}::bigint`);
  const limit = param(filter.limit + 1);
  let sql = `SELECT * FROM ledger WHERE ${where.join(' AND ')} ORDER BY ledger.id LIMIT ${limit}`;
  if (projectIds) {
    // DISTINCT: a project named twice would otherwise return its entries twice.
    const projects = `(SELECT DISTINCT project_id FROM unnest(${param(projectIds)}::uuid[]) AS project_id) AS p`;
    const range = `SELECT * FROM ledger WHERE ${[...where, 'ledger.project_id = p.project_id'].join(' AND ')} ORDER BY ledger.id LIMIT ${limit}`;
    sql = `SELECT l.* FROM ${projects} CROSS JOIN LATERAL (${range}) AS l ORDER BY l.id LIMIT ${limit}`;
  }
  const { rows } = await db.query<LedgerRow>(sql, values);
  const { items, next } = keysetPage(rows, filter.limit, (last) => ({ afterId: last.id }));
  return { items: items.map(toLedger), next };
}
