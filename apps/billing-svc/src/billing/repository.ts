import type { AnnotatorId, Money, ProjectId, TaskId } from '@labelflow/contracts';
import { ServiceKitError, ServiceKitErrors, sortedTaskIds, type BatchStore, type PoolClient, type Queryable } from '@labelflow/service-kit';
import { appendLedger, loadProject, saveBalance, type LedgerEntry } from '../projects/repository';
import { BillingStatus, emptyBilling, type AttemptBilling, type BillingTaskState } from './state';

interface BillingRow {
  task_id: string;
  attempt: number;
  project_id: string;
  annotator_id: string;
  status: string;
  amount: string;
  reason: string | null;
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
  createdAt: r.created_at,
});

export async function listBillings(db: Queryable, taskId: TaskId): Promise<BillingRecord[]> {
  const { rows } = await db.query<BillingRow>('SELECT * FROM billings WHERE task_id = $1 ORDER BY attempt', [taskId]);
  return rows.map(toBilling);
}

/**
 * Loads what billing knows of a task, locking its tombstone row and its project's row: every
 * change to one task's billing, and every balance change of one project, applies one at a time.
 */
export async function loadBillingTask(tx: PoolClient, taskId: TaskId, projectHint: ProjectId | null): Promise<BillingTaskState> {
  await tx.query('INSERT INTO billing_tasks (task_id) VALUES ($1) ON CONFLICT (task_id) DO NOTHING', [taskId]);
  const { rows: marks } = await tx.query<{ latest_attempt: number; cancelled_at: Date | null }>('SELECT latest_attempt, cancelled_at FROM billing_tasks WHERE task_id = $1 FOR UPDATE', [taskId]);
  const billings = await listBillings(tx, taskId);
  const projectId = billings[0]?.projectId ?? projectHint;
  const project = projectId ? await loadProject(tx, projectId, { forUpdate: true }) : null;
  const mark = marks[0];
  return { ...emptyBilling(taskId, project), billings, cancelled: mark?.cancelled_at != null, latestAttempt: mark?.latest_attempt ?? 1 };
}

/**
 * A consumed batch's billing states. Its task rows, then its projects' rows, are locked up front in
 * id order, so batches that share tasks or projects queue instead of deadlocking. Each event then
 * loads and saves its task inside the batch's transaction: tasks of one project share its balance,
 * and every transition books its own ledger entries, which a load-once/save-once unit would merge.
 */
export const billingBatchStore: BatchStore<BillingTaskState> = {
  async open(tx, events) {
    const taskIds = sortedTaskIds(events);
    await tx.query('INSERT INTO billing_tasks (task_id) SELECT unnest($1::text[]) ORDER BY 1 ON CONFLICT (task_id) DO NOTHING', [taskIds]);
    await tx.query('SELECT 1 FROM billing_tasks WHERE task_id = ANY($1::text[]) ORDER BY task_id FOR UPDATE', [taskIds]);
    const { rows } = await tx.query<{ project_id: string }>('SELECT DISTINCT project_id FROM billings WHERE task_id = ANY($1::text[])', [taskIds]);
    const projectIds = [...new Set([...events.map((e) => e.projectId), ...rows.map((r) => r.project_id)])].sort();
    await tx.query('SELECT 1 FROM projects WHERE project_id = ANY($1::uuid[]) ORDER BY project_id FOR UPDATE', [projectIds]);
    const hints = new Map<string, ProjectId>(events.map((e) => [e.taskId, e.projectId as ProjectId]));
    return {
      get: (taskId) => loadBillingTask(tx, taskId as TaskId, hints.get(taskId) ?? null),
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
    await saveBalance(tx, next.project.projectId, next.project.balance, previous.project.version);
  }
  for (const billing of next.billings) {
    const before = previous.billings.find((b) => b.attempt === billing.attempt);
    if (before === billing) continue;
    await saveBilling(tx, billing, before?.status ?? null);
    if (billing.status === before?.status) continue;
    if (billing.status === BillingStatus.completed) await book(tx, billing, [['debit', null], ['credit', billing.annotatorId]], billing.amount);
    if (billing.status === BillingStatus.refunded) await book(tx, billing, [['refund', null], ['reversal', billing.annotatorId]], -billing.amount);
  }
}

async function book(tx: PoolClient, b: AttemptBilling, legs: readonly [LedgerEntry['kind'], AnnotatorId | null][], payoutDelta: Money): Promise<void> {
  await appendLedger(tx, legs.map(([kind, annotatorId]) => ({ projectId: b.projectId, taskId: b.taskId, attempt: b.attempt, kind, annotatorId, amount: b.amount })));
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
    `INSERT INTO billings (task_id, attempt, project_id, annotator_id, status, amount, reason) VALUES ($1, $2, $3, $4, $5, $6, $7)
     ON CONFLICT (task_id, attempt) DO UPDATE SET status = EXCLUDED.status, amount = EXCLUDED.amount, reason = EXCLUDED.reason, updated_at = now()
     WHERE billings.status = $8`,
    [b.taskId, b.attempt, b.projectId, b.annotatorId, b.status, b.amount, b.reason, previousStatus],
  );
  if (result.rowCount !== 1) {
    throw new ServiceKitError(ServiceKitErrors.CONCURRENT_UPDATE, `billing of task ${b.taskId} attempt ${b.attempt} changed concurrently`, { retriable: true });
  }
}

export async function loadPayoutBalance(db: Queryable, annotatorId: AnnotatorId): Promise<Money> {
  const { rows } = await db.query<{ balance: string }>('SELECT balance FROM payouts WHERE annotator_id = $1', [annotatorId]);
  return rows[0] ? Number(rows[0].balance) : 0;
}
