import { PRELABEL_PROPOSED, type Annotation, type AnnotatorId, type ConsumedEvent, type ProjectId, type TaskId } from '@labelflow/contracts';
import { pgArray, ServiceKitError, ServiceKitErrors, unnestColumns, type PoolClient, type Queryable } from '@labelflow/service-kit';
import { insertPrelabels, loadPolicies } from '../prelabels/repository';
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
  billed: boolean;
  submitted_at: Date;
  updated_at: Date;
}

const labelColumns = 'attempt, annotator_id, annotations, status, void_reason, billed, submitted_at, updated_at';

/** A label set written again takes its new status; `billed` never goes back once set. */
const labelUpsertSet = 'status = EXCLUDED.status, void_reason = EXCLUDED.void_reason, billed = labels.billed OR EXCLUDED.billed, updated_at = now()';

const toAssignment = (row: AssignmentRow): Assignment => ({
  projectId: row.project_id as ProjectId,
  attempt: row.attempt,
  annotatorId: row.annotator_id as AnnotatorId | null,
  leaseExpiresAt: row.lease_expires_at?.toISOString() ?? null,
  version: row.version,
});

const toLabel = (r: LabelRow): Label => ({
  attempt: r.attempt,
  annotatorId: r.annotator_id as AnnotatorId,
  annotations: r.annotations,
  status: r.status as LabelStatus,
  voidReason: r.void_reason as VoidReason | null,
  billed: r.billed,
});

/** The task's row: its assignment and cancellation tombstone, locked when asked. */
async function loadTaskRow(db: Queryable, taskId: TaskId, lock: boolean): Promise<{ readonly assignment: Assignment | null; readonly cancelled: boolean }> {
  const { rows } = await db.query<AssignmentRow>(
    `SELECT project_id, attempt, annotator_id, lease_expires_at, cancelled_at, version FROM assignments WHERE task_id = $1${lock ? ' FOR UPDATE' : ''}`,
    [taskId],
  );
  const row = rows[0];
  return { assignment: row ? toAssignment(row) : null, cancelled: row?.cancelled_at != null };
}

/** The task's assignment and tombstone alone, unlocked: what a request checks (its project) before it reads or runs anything more. */
export const loadTaskHead = (db: Queryable, taskId: TaskId) => loadTaskRow(db, taskId, false);

/** The task's assignment alone, unlocked. */
export async function loadAssignment(db: Queryable, taskId: TaskId): Promise<Assignment | null> {
  return (await loadTaskHead(db, taskId)).assignment;
}

/**
 * Loads and locks the task's row (assignment, lease and cancellation tombstone), so two submissions
 * or reactions for one task serialize. A task without a row races to its primary key instead.
 */
export async function loadLabelTask(db: Queryable, taskId: TaskId, lock = true): Promise<LabelTaskState> {
  const head = await loadTaskRow(db, taskId, lock);
  const rows = await listLabelRows(db, taskId);
  return { ...emptyState(taskId), ...head, labels: rows.map(toLabel) };
}

/**
 * Loads a batch's tasks with one query per table, locking their assignment rows in task id order.
 * A batch carrying proposals also loads the pre-label policy of each proposal's project.
 */
export async function loadLabelTasksForUpdate(tx: Queryable, taskIds: readonly TaskId[], events: readonly ConsumedEvent[] = []): Promise<Map<string, LabelTaskState>> {
  const a = await tx.query<AssignmentRow & { task_id: string }>(
    'SELECT task_id, project_id, attempt, annotator_id, lease_expires_at, cancelled_at, version FROM assignments WHERE task_id = ANY($1::text[]) ORDER BY task_id FOR UPDATE',
    [pgArray(taskIds)],
  );
  const l = await tx.query<LabelRow & { task_id: string }>(`SELECT task_id, ${labelColumns} FROM labels WHERE task_id = ANY($1::text[]) ORDER BY task_id, attempt`, [pgArray(taskIds)]);
  const states = new Map<string, LabelTaskState>(taskIds.map((id) => [id, emptyState(id)]));
  for (const row of a.rows) states.set(row.task_id, { ...states.get(row.task_id)!, assignment: toAssignment(row), cancelled: row.cancelled_at != null });
  for (const row of l.rows) {
    const state = states.get(row.task_id)!;
    states.set(row.task_id, { ...state, labels: [...state.labels, toLabel(row)] });
  }
  const proposals = events.filter((e) => e.type === PRELABEL_PROPOSED);
  if (proposals.length > 0) {
    // The task's own project decides: its assignment's, else that of the task's events in this
    // batch (its TaskAssigned may be here), else its first proposal's. A proposal naming another
    // project is refused, and must not bring its project's policy to the task's other proposals.
    const projectOf = new Map<string, string>();
    for (const e of events) if (e.type !== PRELABEL_PROPOSED && !projectOf.has(e.taskId)) projectOf.set(e.taskId, e.projectId);
    for (const e of proposals) {
      const known = states.get(e.taskId)!.assignment?.projectId;
      if (known !== undefined) projectOf.set(e.taskId, known);
      else if (!projectOf.has(e.taskId)) projectOf.set(e.taskId, e.projectId);
    }
    const proposed = new Set(proposals.map((e) => e.taskId));
    const policies = await loadPolicies(tx, [...new Set([...proposed].map((taskId) => projectOf.get(taskId)!))], { share: true });
    for (const taskId of proposed) {
      const policy = policies.get(projectOf.get(taskId)!);
      if (policy) states.set(taskId, { ...states.get(taskId)!, prelabelPolicy: policy });
    }
  }
  return states;
}

/**
 * Saves a batch's changed tasks: new assignments in one insert (racing to the primary key), changed
 * ones in one compare-and-set update, labels in one upsert. Any lost race fails the whole batch.
 */
export async function saveLabelTasks(tx: Queryable, changes: readonly { readonly before: LabelTaskState; readonly after: LabelTaskState }[]): Promise<void> {
  const touched = changes.filter(({ before, after }) => after.assignment && (after.assignment !== before.assignment || after.cancelled !== before.cancelled));
  const inserts = touched.filter(({ before }) => !before.assignment);
  const updates = touched.filter(({ before }) => before.assignment);
  const conflict = (n: number) => new ServiceKitError(ServiceKitErrors.CONCURRENT_UPDATE, `${n} assignments changed concurrently`, { retriable: true });
  if (inserts.length > 0) {
    const inserted = await tx.query(
      `INSERT INTO assignments (task_id, project_id, attempt, annotator_id, lease_expires_at, cancelled_at, version)
       SELECT task_id, project_id, attempt, annotator_id, lease_expires_at, CASE WHEN cancelled THEN now() END, 1
       FROM unnest($1::text[], $2::uuid[], $3::int[], $4::text[], $5::timestamptz[], $6::boolean[]) AS u(task_id, project_id, attempt, annotator_id, lease_expires_at, cancelled)
       ON CONFLICT (task_id) DO NOTHING`,
      unnestColumns(inserts.map(({ after }) => [after.taskId, after.assignment!.projectId, after.assignment!.attempt, after.assignment!.annotatorId, after.assignment!.leaseExpiresAt, after.cancelled])),
    );
    if (inserted.rowCount !== inserts.length) throw conflict(inserts.length - (inserted.rowCount ?? 0));
  }
  if (updates.length > 0) {
    const updated = await tx.query(
      `UPDATE assignments a SET attempt = u.attempt, annotator_id = u.annotator_id, lease_expires_at = u.lease_expires_at,
         cancelled_at = CASE WHEN u.cancelled THEN coalesce(a.cancelled_at, now()) END, version = a.version + 1, updated_at = now()
       FROM unnest($1::text[], $2::int[], $3::text[], $4::timestamptz[], $5::boolean[], $6::int[]) AS u(task_id, attempt, annotator_id, lease_expires_at, cancelled, version)
       WHERE a.task_id = ANY($1::text[]) AND a.task_id = u.task_id AND a.version = u.version`,
      unnestColumns(updates.map(({ before, after }) => [after.taskId, after.assignment!.attempt, after.assignment!.annotatorId, after.assignment!.leaseExpiresAt, after.cancelled, before.assignment!.version])),
    );
    if (updated.rowCount !== updates.length) throw conflict(updates.length - (updated.rowCount ?? 0));
  }
  await insertPrelabels(tx, changes.flatMap(({ before, after }) => after.newPrelabels.filter((p) => !before.newPrelabels.includes(p)).map((prelabel) => ({ taskId: after.taskId, prelabel }))));
  const labels = changes.flatMap(({ before, after }) => after.labels.filter((label) => !before.labels.includes(label)).map((label) => ({ taskId: after.taskId, label })));
  if (labels.length > 0) {
    await tx.query(
      `INSERT INTO labels (task_id, attempt, annotator_id, annotations, status, void_reason, billed)
       SELECT task_id, attempt, annotator_id, annotations::jsonb, status, void_reason, billed
       FROM unnest($1::text[], $2::int[], $3::text[], $4::text[], $5::text[], $6::text[], $7::boolean[]) AS u(task_id, attempt, annotator_id, annotations, status, void_reason, billed)
       ON CONFLICT (task_id, attempt) DO UPDATE SET ${labelUpsertSet}`,
      unnestColumns(labels.map(({ taskId, label }) => [taskId, label.attempt, label.annotatorId, JSON.stringify(label.annotations), label.status, label.voidReason, label.billed])),
    );
  }
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
      `INSERT INTO labels (task_id, attempt, annotator_id, annotations, status, void_reason, billed) VALUES ($1, $2, $3, $4::jsonb, $5, $6, $7)
       ON CONFLICT (task_id, attempt) DO UPDATE SET ${labelUpsertSet}`,
      [next.taskId, label.attempt, label.annotatorId, JSON.stringify(label.annotations), label.status, label.voidReason, label.billed],
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
