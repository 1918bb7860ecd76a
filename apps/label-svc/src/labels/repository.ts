import type { Annotation, AnnotatorId, ProjectId, TaskId } from '@labelflow/contracts';
import { ServiceKitError, ServiceKitErrors, type PoolClient, type Queryable } from '@labelflow/service-kit';
import { emptyState, type Assignment, type Label, type LabelStatus, type LabelTaskState, type VoidReason } from './state';

interface AssignmentRow {
  project_id: string;
  attempt: number;
  annotator_id: string | null;
  lease_expires_at: Date | null;
  cancelled_at: Date | null;
  version: number;
}
interface LabelRow {
  attempt: number;
  annotator_id: string;
  annotations: Annotation[];
  status: string;
  void_reason: string | null;
  submitted_at: Date;
  updated_at: Date;
}

const labelColumns = 'attempt, annotator_id, annotations, status, void_reason, submitted_at, updated_at';

/**
 * Loads and locks the task's row (assignment, lease and cancellation tombstone), so two submissions
 * or reactions for one task serialize. A task without a row races to its primary key instead.
 */
export async function loadLabelTask(db: Queryable, taskId: TaskId, lock = true): Promise<LabelTaskState> {
  const a = await db.query<AssignmentRow>(
    `SELECT project_id, attempt, annotator_id, lease_expires_at, cancelled_at, version FROM assignments WHERE task_id = $1${lock ? ' FOR UPDATE' : ''}`,
    [taskId],
  );
  const rows = await listLabelRows(db, taskId);
  const row = a.rows[0];
  const assignment: Assignment | null = row
    ? {
        projectId: row.project_id as ProjectId,
        attempt: row.attempt,
        annotatorId: row.annotator_id as AnnotatorId | null,
        leaseExpiresAt: row.lease_expires_at?.toISOString() ?? null,
        version: row.version,
      }
    : null;
  const labels: Label[] = rows.map((r) => ({
    attempt: r.attempt,
    annotatorId: r.annotator_id as AnnotatorId,
    annotations: r.annotations,
    status: r.status as LabelStatus,
    voidReason: r.void_reason as VoidReason | null,
  }));
  return { ...emptyState(taskId), assignment, cancelled: row?.cancelled_at != null, labels };
}

export async function listLabelRows(db: Queryable, taskId: TaskId): Promise<LabelRow[]> {
  return (await db.query<LabelRow>(`SELECT ${labelColumns} FROM labels WHERE task_id = $1 ORDER BY attempt`, [taskId])).rows;
}

export async function saveLabelTask(tx: PoolClient, previous: LabelTaskState, next: LabelTaskState): Promise<void> {
  if (next.assignment && (next.assignment !== previous.assignment || next.cancelled !== previous.cancelled)) {
    await saveAssignment(tx, next.taskId, next.assignment, next.cancelled, previous.assignment);
  }
  for (const label of next.labels) {
    const before = previous.labels.find((l) => l.attempt === label.attempt);
    if (before === label) continue;
    await tx.query(
      `INSERT INTO labels (task_id, attempt, annotator_id, annotations, status, void_reason) VALUES ($1, $2, $3, $4::jsonb, $5, $6)
       ON CONFLICT (task_id, attempt) DO UPDATE SET status = EXCLUDED.status, void_reason = EXCLUDED.void_reason, updated_at = now()`,
      [next.taskId, label.attempt, label.annotatorId, JSON.stringify(label.annotations), label.status, label.voidReason],
    );
  }
}

/** Compare-and-set on the row's version; the first row of a task races to the primary key. */
async function saveAssignment(tx: PoolClient, taskId: TaskId, a: Assignment, cancelled: boolean, previous: Assignment | null): Promise<void> {
  if (!previous) {
    const inserted = await tx.query(
      `INSERT INTO assignments (task_id, project_id, attempt, annotator_id, lease_expires_at, cancelled_at, version)
       VALUES ($1, $2, $3, $4, $5, CASE WHEN $6::boolean THEN now() END, 1) ON CONFLICT (task_id) DO NOTHING`,
      [taskId, a.projectId, a.attempt, a.annotatorId, a.leaseExpiresAt, cancelled],
    );
    if (inserted.rowCount === 1) return;
  } else {
    const updated = await tx.query(
      `UPDATE assignments SET attempt = $2, annotator_id = $3, lease_expires_at = $4,
         cancelled_at = CASE WHEN $5::boolean THEN coalesce(cancelled_at, now()) END, version = version + 1, updated_at = now()
       WHERE task_id = $1 AND version = $6`,
      [taskId, a.attempt, a.annotatorId, a.leaseExpiresAt, cancelled, previous.version],
    );
    if (updated.rowCount === 1) return;
  }
  throw new ServiceKitError(ServiceKitErrors.CONCURRENT_UPDATE, `assignment of task ${taskId} changed concurrently`, { retriable: true });
}
