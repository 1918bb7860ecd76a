import type { AnnotatorId, DomainEvent, Money, ProjectId, TaskId } from '@labelflow/contracts';
import { pgArray, ServiceKitError, ServiceKitErrors, sortedTaskIds, type BatchStore, type PoolClient, type Queryable } from '@labelflow/service-kit';
import { budgets, type LedgerEntry } from '../projects/port';
import { BillingStatus, emptyBilling, isMachine, type AttemptBilling, type BillingTaskState, type ProjectBudget } from './state';

interface BillingRow {
  task_id: string;
  attempt: number;
  project_id: string;
  annotator_id: string;
  status: string;
  amount: string;
  reason: string | null;
  approved_by: string | null;
  created_at: Date;
}

export type BillingRecord = AttemptBilling & { readonly createdAt: Date };

const toBilling = (r: BillingRow): BillingRecord => ({
  taskId: r.task_id as TaskId,
  attempt: r.attempt,
  projectId: r.project_id as ProjectId,
  annotatorId: r.annotator_id as AnnotatorId,
  status: r.status as BillingStatus,
  amount: Number(r.amount),
  reason: r.reason,
  approvedBy: r.approved_by,
  createdAt: r.created_at,
});

export async function listBillings(db: Queryable, taskId: TaskId): Promise<BillingRecord[]> {
  const { rows } = await db.query<BillingRow>('SELECT * FROM billings WHERE task_id = $1 ORDER BY attempt', [taskId]);
  return rows.map(toBilling);
}

/** The payout rows a task's load reads and locks, besides those of the annotators of its billings. */
export interface PayoutRows {
  /** The approved annotator of a QaPassed (who may be paid). */
  readonly annotators?: readonly AnnotatorId[];
}

/**
 * Loads what billing knows of a task, locking its tombstone row, its project's row and the payout
 * rows of its annotators: every change to one task's billing, every balance change of one project
 * and every change to one annotator's payout applies one at a time, so the limits decide checks
 * against are the balances the booking then moves.
 */
export async function loadBillingTask(tx: PoolClient, taskId: TaskId, projectHint: ProjectId | null, payoutRows: PayoutRows = {}): Promise<BillingTaskState> {
  await tx.query('INSERT INTO billing_tasks (task_id) VALUES ($1) ON CONFLICT (task_id) DO NOTHING', [taskId]);
  const { rows: marks } = await tx.query<{ latest_attempt: number; cancelled_at: Date | null }>('SELECT latest_attempt, cancelled_at FROM billing_tasks WHERE task_id = $1 FOR UPDATE', [taskId]);
  const billings = await listBillings(tx, taskId);
  const projectId = billings[0]?.projectId ?? projectHint;
  const project = projectId ? await budgets.load(tx, projectId) : null;
  // Without its project no money moves for the task, so no payout is needed.
  const annotators = project ? [...(payoutRows.annotators ?? []), ...billings.map((b) => b.annotatorId)].filter((a) => !isMachine(a)) : [];
  const held = await lockPayouts(tx, annotators.map((annotatorId) => ({ annotatorId, currency: project!.currency })));
  const payouts = Object.fromEntries([...held].map(([key, balance]) => [annotatorOfKey(key), balance]));
  const mark = marks[0];
  return { ...emptyBilling(taskId, project, payouts), billings, cancelled: mark?.cancelled_at != null, latestAttempt: mark?.latest_attempt ?? 1 };
}

/** One payout: an annotator's balance in one currency. */
interface PayoutKey {
  readonly annotatorId: AnnotatorId;
  readonly currency: string;
}

/** A currency code is three letters, so the key splits back unambiguously whatever the annotator id holds. */
const payoutKey = ({ annotatorId, currency }: PayoutKey): string => `${currency}:${annotatorId}`;
const annotatorOfKey = (key: string): AnnotatorId => key.slice(4) as AnnotatorId;

/**
 * Creates a zero payout row for each (annotator, currency) that has none, then locks the rows in
 * key order and returns their balances by `payoutKey`. The rows exist before the lock, so the lock
 * covers every payout a decision may move: two first credits of one annotator queue on the row
 * instead of both deciding against a balance of 0. Every payout row of those annotators is locked,
 * in every currency, not only the ones wanted: the ledger entries of one annotator then get their
 * ids in the order they commit, and a client paging through her payouts by id never passes an
 * entry that commits later with a smaller one (a credit in another currency, booked at once).
 */
async function lockPayouts(tx: PoolClient, wanted: readonly PayoutKey[]): Promise<Map<string, Money>> {
  if (wanted.length === 0) return new Map();
  const keys = [...new Map(wanted.map((k) => [payoutKey(k), k])).values()].sort((a, b) => (a.annotatorId < b.annotatorId ? -1 : a.annotatorId > b.annotatorId ? 1 : a.currency < b.currency ? -1 : a.currency > b.currency ? 1 : 0));
  const columns = [pgArray(keys.map((k) => k.annotatorId)), pgArray(keys.map((k) => k.currency))];
  await tx.query(
    `INSERT INTO payouts (annotator_id, currency, balance) SELECT a, c, 0 FROM unnest($1::text[], $2::text[]) AS u(a, c) ORDER BY 1, 2 ON CONFLICT (annotator_id, currency) DO NOTHING`,
    columns,
  );
  const { rows } = await tx.query<{ annotator_id: string; currency: string; balance: string }>(
    'SELECT annotator_id, currency, balance FROM payouts WHERE annotator_id = ANY($1::text[]) ORDER BY annotator_id, currency FOR UPDATE',
    [columns[0]],
  );
  const wantedKeys = new Set(keys.map(payoutKey));
  return new Map(
    rows.map((r) => [payoutKey({ annotatorId: r.annotator_id as AnnotatorId, currency: r.currency }), Number(r.balance)] as const).filter(([key]) => wantedKeys.has(key)),
  );
}

// A model has no payout row: nothing to create or lock for it.
const approvedAnnotator = (event: DomainEvent): AnnotatorId | null => (event.type === 'QaPassed' && !isMachine(event.payload.annotatorId) ? event.payload.annotatorId : null);

/**
 * A consumed batch's billing states, loaded with one query per table and saved with one statement
 * per table. Its task rows, then its projects' rows, then its annotators' payout rows are locked up
 * front in id order, so batches that share tasks, projects or annotators queue instead of
 * deadlocking. Tasks of one project share its balance and tasks of one annotator their payout: each
 * `get` reads them as the batch's earlier events left them. Every transition books its own ledger
 * entries (kept in order, never merged); the balances are written once, as they ended.
 */
export const billingBatchStore: BatchStore<BillingTaskState> = {
  async open(tx, events) {
    const ids = pgArray(sortedTaskIds(events));
    await tx.query('INSERT INTO billing_tasks (task_id) SELECT unnest($1::text[]) ORDER BY 1 ON CONFLICT (task_id) DO NOTHING', [ids]);
    const { rows: markRows } = await tx.query<{ task_id: string; latest_attempt: number; cancelled_at: Date | null }>(
      'SELECT task_id, latest_attempt, cancelled_at FROM billing_tasks WHERE task_id = ANY($1::text[]) ORDER BY task_id FOR UPDATE',
      [ids],
    );
    const { rows: billingRows } = await tx.query<BillingRow>('SELECT * FROM billings WHERE task_id = ANY($1::text[]) ORDER BY task_id, attempt', [ids]);
    const projects = await budgets.loadAll(tx, [...new Set([...events.map((e) => e.projectId), ...billingRows.map((r) => r.project_id as ProjectId)])].sort());
    const approved = new Map<string, AnnotatorId[]>();
    for (const e of events) {
      const annotator = approvedAnnotator(e);
      if (annotator) approved.set(e.taskId, [...(approved.get(e.taskId) ?? []), annotator]);
    }
    const hints = new Map(events.map((e) => [e.taskId, e.projectId]));
    // Each task's payouts are in its project's currency; a task whose project is missing moves none.
    const currencyOf = (projectId: string | undefined): string | undefined => (projectId === undefined ? undefined : projects.get(projectId)?.currency);
    const wanted: PayoutKey[] = [];
    const billedProject = new Map<string, string>();
    for (const r of billingRows) {
      if (!billedProject.has(r.task_id)) billedProject.set(r.task_id, r.project_id);
      const currency = currencyOf(billedProject.get(r.task_id));
      if (currency && !isMachine(r.annotator_id)) wanted.push({ annotatorId: r.annotator_id as AnnotatorId, currency });
    }
    for (const [taskId, annotators] of approved) {
      const currency = currencyOf(billedProject.get(taskId) ?? hints.get(taskId as TaskId));
      if (currency) wanted.push(...annotators.map((annotatorId) => ({ annotatorId, currency })));
    }
    const payouts = await lockPayouts(tx, wanted);
    const marks = new Map(markRows.map((r) => [r.task_id, { cancelled: r.cancelled_at != null, latestAttempt: r.latest_attempt }]));
    const billings = new Map<string, AttemptBilling[]>();
    const storedStatus = new Map<string, string>();
    for (const r of billingRows) {
      billings.set(r.task_id, [...(billings.get(r.task_id) ?? []), toBilling(r)]);
      storedStatus.set(`${r.task_id}/${r.attempt}`, r.status);
    }
    const pending = createPendingWrites(projects, payouts, storedStatus);
    return {
      get(taskId) {
        const mine = billings.get(taskId) ?? [];
        const projectId = mine[0]?.projectId ?? hints.get(taskId) ?? null;
        const project = projectId ? pending.project(projectId) : null;
        const payoutOf = project ? [...(approved.get(taskId) ?? []), ...mine.map((b) => b.annotatorId)].filter((a) => !isMachine(a)) : [];
        const mark = marks.get(taskId);
        return {
          ...emptyBilling(taskId, project, Object.fromEntries(payoutOf.map((a) => [a, payouts.get(payoutKey({ annotatorId: a, currency: project!.currency })) ?? 0]))),
          billings: mine,
          cancelled: mark?.cancelled ?? false,
          latestAttempt: mark?.latestAttempt ?? 1,
        };
      },
      set(taskId, previous, next) {
        billings.set(taskId, [...next.billings]);
        marks.set(taskId, { cancelled: next.cancelled, latestAttempt: next.latestAttempt });
        pending.record(previous, next);
      },
      save: () => pending.save(tx),
    };
  },
};

/**
 * What a batch changed, kept in memory until `save`: task marks, billings (each compared on save with
 * the status stored when the batch opened), ledger entries in booking order, project balances and
 * payouts as they ended.
 */
function createPendingWrites(projects: Map<string, ProjectBudget>, payouts: Map<string, Money>, storedStatus: ReadonlyMap<string, string>) {
  const loaded = new Map(projects);
  const moves = new Map<string, number>();
  const marks = new Map<string, { readonly latestAttempt: number; readonly cancelled: boolean }>();
  const changedBillings = new Map<string, AttemptBilling>();
  const ledger: LedgerEntry[] = [];
  const movedPayouts = new Set<string>();
  return {
    project: (projectId: ProjectId): ProjectBudget | null => projects.get(projectId) ?? null,
    record(previous: BillingTaskState, next: BillingTaskState): void {
      if (next.cancelled !== previous.cancelled || next.latestAttempt !== previous.latestAttempt) marks.set(next.taskId, { latestAttempt: next.latestAttempt, cancelled: next.cancelled });
      if (previous.project && next.project && next.project.balance !== previous.project.balance) {
        projects.set(next.project.projectId, next.project);
        moves.set(next.project.projectId, (moves.get(next.project.projectId) ?? 0) + 1);
      }
      for (const billing of next.billings) {
        const before = previous.billings.find((b) => b.attempt === billing.attempt);
        if (before === billing) continue;
        changedBillings.set(`${billing.taskId}/${billing.attempt}`, billing);
        if (billing.status === before?.status) continue;
        const move = moveOf(billing);
        if (!move) continue;
        const booked = bookings(billing, move.legs, move.payoutDelta, move.actor);
        ledger.push(...booked.entries);
        if (booked.payout) {
          const key = payoutKey({ annotatorId: booked.payout.annotatorId, currency: currencyOfBilling(billing, next) });
          payouts.set(key, (payouts.get(key) ?? 0) + booked.payout.delta);
          movedPayouts.add(key);
        }
      }
    },
    async save(tx: PoolClient): Promise<void> {
      if (marks.size > 0) {
        const rows = [...marks];
        await tx.query(
          `UPDATE billing_tasks t SET latest_attempt = u.latest_attempt, cancelled_at = CASE WHEN u.cancelled THEN COALESCE(t.cancelled_at, now()) END, updated_at = now()
           FROM unnest($1::text[], $2::int[], $3::boolean[]) AS u(task_id, latest_attempt, cancelled) WHERE t.task_id = ANY($1::text[]) AND t.task_id = u.task_id`,
          [pgArray(rows.map(([id]) => id)), pgArray(rows.map(([, m]) => m.latestAttempt)), pgArray(rows.map(([, m]) => m.cancelled))],
        );
      }
      await budgets.moveAll(tx, [...moves].map(([projectId, changes]) => ({ before: loaded.get(projectId)!, after: projects.get(projectId)!, changes })));
      await saveBillings(tx, [...changedBillings.values()].map((b) => ({ billing: b, storedStatus: storedStatus.get(`${b.taskId}/${b.attempt}`) ?? null })));
      await budgets.book(tx, ledger);
      if (movedPayouts.size > 0) {
        const moved = [...movedPayouts];
        await tx.query(
          `UPDATE payouts p SET balance = u.balance, updated_at = now() FROM unnest($1::text[], $2::text[], $3::bigint[]) AS u(annotator_id, currency, balance)
           WHERE p.annotator_id = ANY($1::text[]) AND p.annotator_id = u.annotator_id AND p.currency = u.currency`,
          [pgArray(moved.map(annotatorOfKey)), pgArray(moved.map((key) => key.slice(0, 3))), pgArray(moved.map((key) => payouts.get(key) ?? 0))],
        );
      }
    },
  };
}

/** A billing moves money only with its project loaded: its currency is the payout's. */
function currencyOfBilling(billing: AttemptBilling, state: BillingTaskState): string {
  // Unreachable: decide completes a billing only against its loaded project, and refunds one it completed.
  if (state.project?.projectId !== billing.projectId) throw new Error(`billing of task ${billing.taskId} attempt ${billing.attempt} moved a payout without its project ${billing.projectId} loaded`);
  return state.project.currency;
}

/**
 * Upserts billings in one statement, each by compare-and-set on the status stored when its batch
 * opened (none: it must not exist yet). Finding another status means a concurrent writer won.
 */
async function saveBillings(tx: PoolClient, writes: readonly { readonly billing: AttemptBilling; readonly storedStatus: string | null }[]): Promise<void> {
  if (writes.length === 0) return;
  const { rows } = await tx.query<{ n: number }>(
    `WITH w AS (
       SELECT * FROM jsonb_to_recordset($1::jsonb) AS w(task_id text, attempt int, project_id uuid, annotator_id text, status text, amount bigint, reason text, approved_by text, stored text)
     ), updated AS (
       UPDATE billings b SET status = w.status, amount = w.amount, reason = w.reason, approved_by = coalesce(w.approved_by, b.approved_by), updated_at = now()
       FROM w WHERE w.stored IS NOT NULL AND b.task_id = ANY($2::text[]) AND b.task_id = w.task_id AND b.attempt = w.attempt AND b.status = w.stored
       RETURNING 1
     ), inserted AS (
       INSERT INTO billings (task_id, attempt, project_id, annotator_id, status, amount, reason, approved_by)
       SELECT task_id, attempt, project_id, annotator_id, status, amount, reason, approved_by FROM w WHERE w.stored IS NULL ORDER BY task_id, attempt
       ON CONFLICT (task_id, attempt) DO NOTHING
       RETURNING 1
     )
     SELECT ((SELECT count(*) FROM updated) + (SELECT count(*) FROM inserted))::int AS n`,
    [
      JSON.stringify(
        writes.map(({ billing: b, storedStatus }) => ({ task_id: b.taskId, attempt: b.attempt, project_id: b.projectId, annotator_id: b.annotatorId, status: b.status, amount: b.amount, reason: b.reason, approved_by: b.approvedBy, stored: storedStatus })),
      ),
      pgArray(writes.map(({ billing: b }) => b.taskId)),
    ],
  );
  if (rows[0]?.n !== writes.length) {
    throw new ServiceKitError(ServiceKitErrors.CONCURRENT_UPDATE, `a billing of ${writes.map(({ billing: b }) => `${b.taskId}/${b.attempt}`).join(', ')} changed concurrently`, { retriable: true });
  }
}

/**
 * Saves the state and books the money its transitions imply: a billing that became completed is a
 * debit of the project and a credit of the annotator; one that became refunded returns both. The
 * ledger's UNIQUE (task_id, attempt, kind) makes a second booking of either impossible.
 */
export async function saveBillingTask(tx: PoolClient, previous: BillingTaskState, next: BillingTaskState): Promise<void> {
  if (next.cancelled !== previous.cancelled || next.latestAttempt !== previous.latestAttempt) {
    await tx.query('UPDATE billing_tasks SET latest_attempt = $2, cancelled_at = CASE WHEN $3 THEN COALESCE(cancelled_at, now()) END, updated_at = now() WHERE task_id = $1', [
      next.taskId,
      next.latestAttempt,
      next.cancelled,
    ]);
  }
  if (previous.project && next.project && next.project.balance !== previous.project.balance) {
    await budgets.move(tx, previous.project, next.project);
  }
  for (const billing of next.billings) {
    const before = previous.billings.find((b) => b.attempt === billing.attempt);
    if (before === billing) continue;
    await saveBilling(tx, billing, before?.status ?? null);
    if (billing.status === before?.status) continue;
    const move = moveOf(billing);
    if (move) await book(tx, billing, next, move.legs, move.payoutDelta, move.actor);
  }
}

type Legs = readonly [LedgerEntry['kind'], AnnotatorId | null][];

/** What a billing's move to its status books: the ledger legs, the payout's change and who made it; nothing for a failure, which moves no money. */
function moveOf(b: AttemptBilling): { readonly legs: Legs; readonly payoutDelta: Money; readonly actor: string | null } | undefined {
  const status = b.status;
  switch (status) {
    case BillingStatus.completed:
      return { legs: [['debit', null], ['credit', b.annotatorId]], payoutDelta: b.amount, actor: b.approvedBy };
    case BillingStatus.refunded:
      return { legs: [['refund', null], ['reversal', b.annotatorId]], payoutDelta: -b.amount, actor: b.refundedBy ?? null };
    case BillingStatus.failed:
      return undefined;
    default: {
      const unhandled: never = status;
      return unhandled;
    }
  }
}

/** The ledger entries a billing's transition books, and the payout it moves (none for a model's labels). */
function bookings(b: AttemptBilling, legs: readonly [LedgerEntry['kind'], AnnotatorId | null][], payoutDelta: Money, actor: string | null): { readonly entries: LedgerEntry[]; readonly payout?: { readonly annotatorId: AnnotatorId; readonly delta: Money } } {
  const entry = ([kind, annotatorId]: readonly [LedgerEntry['kind'], AnnotatorId | null]): LedgerEntry => ({ projectId: b.projectId, taskId: b.taskId, attempt: b.attempt, kind, annotatorId, amount: b.amount, actor });
  // A model's labels: the project side only (debit or refund), and nothing at all at a machine
  // price of 0, since the ledger holds only money that moved.
  if (isMachine(b.annotatorId)) return { entries: b.amount > 0 ? legs.filter(([, annotatorId]) => annotatorId === null).map(entry) : [] };
  return { entries: legs.map(entry), payout: { annotatorId: b.annotatorId, delta: payoutDelta } };
}

async function book(tx: PoolClient, b: AttemptBilling, state: BillingTaskState, legs: readonly [LedgerEntry['kind'], AnnotatorId | null][], payoutDelta: Money, actor: string | null): Promise<void> {
  const { entries, payout } = bookings(b, legs, payoutDelta, actor);
  if (entries.length > 0) await budgets.book(tx, entries);
  if (!payout) return;
  // A reversal only ever follows its credit, so the row exists; an upsert would not do here,
  // since its proposed row (a negative balance) fails the CHECK before ON CONFLICT is considered.
  const sql =
    payout.delta >= 0
      ? `INSERT INTO payouts (annotator_id, currency, balance) VALUES ($1, $3, $2)
         ON CONFLICT (annotator_id, currency) DO UPDATE SET balance = payouts.balance + EXCLUDED.balance, updated_at = now()`
      : 'UPDATE payouts SET balance = balance + $2, updated_at = now() WHERE annotator_id = $1 AND currency = $3';
  await tx.query(sql, [payout.annotatorId, payout.delta, currencyOfBilling(b, state)]);
}

/** Compare-and-set on the billing's status: finding another status means a concurrent writer won. */
async function saveBilling(db: Queryable, b: AttemptBilling, previousStatus: string | null): Promise<void> {
  const result = await db.query(
    `INSERT INTO billings (task_id, attempt, project_id, annotator_id, status, amount, reason, approved_by) VALUES ($1, $2, $3, $4, $5, $6, $7, $9)
     ON CONFLICT (task_id, attempt) DO UPDATE SET status = EXCLUDED.status, amount = EXCLUDED.amount, reason = EXCLUDED.reason,
       approved_by = coalesce(EXCLUDED.approved_by, billings.approved_by), updated_at = now()
     WHERE billings.status = $8`,
    [b.taskId, b.attempt, b.projectId, b.annotatorId, b.status, b.amount, b.reason, previousStatus, b.approvedBy],
  );
  if (result.rowCount !== 1) {
    throw new ServiceKitError(ServiceKitErrors.CONCURRENT_UPDATE, `billing of task ${b.taskId} attempt ${b.attempt} changed concurrently`, { retriable: true });
  }
}

/** An annotator's payout balances by currency code, in code order; none when nothing was ever credited. */
export async function loadPayoutBalances(db: Queryable, annotatorId: AnnotatorId): Promise<Record<string, Money>> {
  const { rows } = await db.query<{ currency: string; balance: string }>('SELECT currency, balance FROM payouts WHERE annotator_id = $1 ORDER BY currency', [annotatorId]);
  return Object.fromEntries(rows.map((r) => [r.currency, Number(r.balance)]));
}
