import type { AnnotatorId, DomainEvent, Money, ProjectId, TaskId } from '@labelflow/contracts';
import { pgArray, ServiceKitError, ServiceKitErrors, sortedTaskIds, type BatchStore, type PoolClient, type Queryable } from '@labelflow/service-kit';
import { budgets, type LedgerEntry } from '../projects/port';
import { BillingStatus, emptyBilling, isMachine, type AttemptBilling, type BillingTaskState } from './state';

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
  /** A batch created and locked these rows up front already: read them, without inserting. */
  readonly locked?: boolean;
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
  const annotators = [...(payoutRows.annotators ?? []), ...billings.map((b) => b.annotatorId)].filter((a) => !isMachine(a));
  if (!payoutRows.locked) await ensurePayoutRows(tx, annotators);
  const payouts = await lockPayouts(tx, annotators);
  const mark = marks[0];
  return { ...emptyBilling(taskId, project, payouts), billings, cancelled: mark?.cancelled_at != null, latestAttempt: mark?.latest_attempt ?? 1 };
}

/**
 * Creates a zero payout row for each annotator that has none, so that the lock taken next covers
 * every payout a decision may move: two first credits of one annotator queue on the row instead of
 * both deciding against a balance of 0.
 */
async function ensurePayoutRows(tx: PoolClient, annotators: readonly AnnotatorId[]): Promise<void> {
  if (annotators.length === 0) return;
  await tx.query('INSERT INTO payouts (annotator_id, balance) SELECT a, 0 FROM unnest($1::text[]) AS a ORDER BY 1 ON CONFLICT (annotator_id) DO NOTHING', [[...new Set(annotators)]]);
}

/** Locks the annotators' payout rows, in id order, and returns their balances. */
async function lockPayouts(tx: PoolClient, annotators: readonly AnnotatorId[]): Promise<Record<string, Money>> {
  if (annotators.length === 0) return {};
  const { rows } = await tx.query<{ annotator_id: string; balance: string }>(
    'SELECT annotator_id, balance FROM payouts WHERE annotator_id = ANY($1::text[]) ORDER BY annotator_id FOR UPDATE',
    [[...new Set(annotators)]],
  );
  return Object.fromEntries(rows.map((r) => [r.annotator_id, Number(r.balance)]));
}

// A model has no payout row: nothing to create or lock for it.
const approvedAnnotator = (event: DomainEvent): AnnotatorId | null => (event.type === 'QaPassed' && !isMachine(event.payload.annotatorId) ? event.payload.annotatorId : null);

/**
 * A consumed batch's billing states. Its task rows, then its projects' rows, then its annotators'
 * payout rows are locked up front in id order, so batches that share tasks, projects or annotators
 * queue instead of deadlocking. Each event then loads and saves its task inside the batch's
 * transaction: tasks of one project share its balance, tasks of one annotator their payout, and
 * every transition books its own ledger entries, which a load-once/save-once unit would merge.
 */
export const billingBatchStore: BatchStore<BillingTaskState> = {
  async open(tx, events) {
    const taskIds = sortedTaskIds(events);
    await tx.query('INSERT INTO billing_tasks (task_id) SELECT unnest($1::text[]) ORDER BY 1 ON CONFLICT (task_id) DO NOTHING', [pgArray(taskIds)]);
    await tx.query('SELECT 1 FROM billing_tasks WHERE task_id = ANY($1::text[]) ORDER BY task_id FOR UPDATE', [pgArray(taskIds)]);
    const { rows } = await tx.query<{ project_id: ProjectId; annotator_id: AnnotatorId }>('SELECT DISTINCT project_id, annotator_id FROM billings WHERE task_id = ANY($1::text[])', [pgArray(taskIds)]);
    await budgets.lockAll(tx, [...new Set([...events.map((e) => e.projectId), ...rows.map((r) => r.project_id)])].sort());
    const approved = new Map<string, AnnotatorId[]>();
    for (const e of events) {
      const annotator = approvedAnnotator(e);
      if (annotator) approved.set(e.taskId, [...(approved.get(e.taskId) ?? []), annotator]);
    }
    const annotators = [...rows.map((r) => r.annotator_id).filter((a) => !isMachine(a)), ...[...approved.values()].flat()];
    await ensurePayoutRows(tx, annotators);
    await lockPayouts(tx, annotators);
    const hints = new Map(events.map((e) => [e.taskId, e.projectId]));
    return {
      get: (taskId) => loadBillingTask(tx, taskId, hints.get(taskId) ?? null, { annotators: approved.get(taskId) ?? [], locked: true }),
      set: (_taskId, previous, next) => saveBillingTask(tx, previous, next),
      save: async () => undefined,
    };
  },
};

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
    if (billing.status === BillingStatus.completed) await book(tx, billing, [['debit', null], ['credit', billing.annotatorId]], billing.amount, billing.approvedBy);
    if (billing.status === BillingStatus.refunded) await book(tx, billing, [['refund', null], ['reversal', billing.annotatorId]], -billing.amount, billing.refundedBy ?? null);
  }
}

async function book(tx: PoolClient, b: AttemptBilling, legs: readonly [LedgerEntry['kind'], AnnotatorId | null][], payoutDelta: Money, actor: string | null): Promise<void> {
  if (isMachine(b.annotatorId)) {
    // A model's labels: the project side only (debit or refund), and nothing at all at a machine
    // price of 0, since the ledger holds only money that moved.
    if (b.amount > 0) await budgets.book(tx, legs.filter(([, annotatorId]) => annotatorId === null).map(([kind]) => ({ projectId: b.projectId, taskId: b.taskId, attempt: b.attempt, kind, annotatorId: null, amount: b.amount, actor })));
    return;
  }
  await budgets.book(tx, legs.map(([kind, annotatorId]) => ({ projectId: b.projectId, taskId: b.taskId, attempt: b.attempt, kind, annotatorId, amount: b.amount, actor })));
  // A reversal only ever follows its credit, so the row exists; an upsert would not do here,
  // since its proposed row (a negative balance) fails the CHECK before ON CONFLICT is considered.
  const sql =
    payoutDelta >= 0
      ? `INSERT INTO payouts (annotator_id, balance) VALUES ($1, $2)
         ON CONFLICT (annotator_id) DO UPDATE SET balance = payouts.balance + EXCLUDED.balance, updated_at = now()`
      : 'UPDATE payouts SET balance = balance + $2, updated_at = now() WHERE annotator_id = $1';
  await tx.query(sql, [b.annotatorId, payoutDelta]);
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

export async function loadPayoutBalance(db: Queryable, annotatorId: AnnotatorId): Promise<Money> {
  const { rows } = await db.query<{ balance: string }>('SELECT balance FROM payouts WHERE annotator_id = $1', [annotatorId]);
  return rows[0] ? Number(rows[0].balance) : 0;
}
