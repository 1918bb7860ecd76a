import type { AnnotatorId, ProjectId, TaskId } from '@labelflow/contracts';
import { z } from 'zod';
import { pgArray, keysetPage, keysetQuery, ServiceKitError, ServiceKitErrors, TimestampKey, timestampKeySql, type Queryable } from '@labelflow/service-kit';
import type { TaskState, TaskStatus } from './state';

interface TaskRow {
  task_id: string;
  project_id: string;
  title: string;
  data_uri: string;
  task_number: string | null;
  status: string;
  attempt: number;
  assignee: string | null;
  lease_expires_at: Date | null;
  reason: string | null;
  rejected_by: string[];
  labelled_by: string[];
  version: number;
  created_at: Date;
  updated_at: Date;
}

export type TaskRecord = TaskState & { readonly createdAt: Date; readonly updatedAt: Date };

const toState = (r: TaskRow): TaskRecord => ({
  taskId: r.task_id as TaskId,
  projectId: r.project_id as ProjectId,
  title: r.title,
  dataUri: r.data_uri,
  taskNumber: r.task_number,
  status: r.status as TaskStatus,
  attempt: r.attempt,
  assignee: r.assignee as AnnotatorId | null,
  leaseExpiresAt: r.lease_expires_at?.toISOString() ?? null,
  reason: r.reason,
  rejectedBy: r.rejected_by,
  labelledBy: r.labelled_by,
  version: r.version,
  createdAt: r.created_at,
  updatedAt: r.updated_at,
});

export async function loadTask(db: Queryable, taskId: TaskId): Promise<TaskRecord | null> {
  const { rows } = await db.query<TaskRow>('SELECT * FROM tasks WHERE task_id = $1', [taskId]);
  return rows[0] ? toState(rows[0]) : null;
}

/** Loads and locks a batch's tasks with one query, in task id order (a missing task maps to null). */
export async function loadTasksForUpdate(tx: Queryable, taskIds: readonly string[]): Promise<Map<string, TaskRecord | null>> {
  const { rows } = await tx.query<TaskRow>('SELECT * FROM tasks WHERE task_id = ANY($1::text[]) ORDER BY task_id FOR UPDATE', [pgArray(taskIds)]);
  const found = new Map<string, TaskRecord | null>(taskIds.map((id) => [id, null]));
  for (const row of rows) found.set(row.task_id, toState(row));
  return found;
}

/**
 * Saves a batch's changed tasks with one compare-and-set statement; a task new to the table (none
 * is created by consumers today) goes through `saveTask`.
 */
export async function saveTasks(tx: Queryable, changes: readonly { readonly before: TaskState | null; readonly after: TaskState | null }[]): Promise<void> {
  const updates = changes.flatMap(({ before, after }) => (before && after ? [{ next: after, version: before.version }] : []));
  for (const { before, after } of changes) if (!before && after) await saveTask(tx, after, null);
  if (updates.length === 0) return;
  const result = await tx.query(
    // rejected_by and labelled_by are lists per task: each element of $8 and $9 is that task's list as an array literal.
    `UPDATE tasks t SET status = u.status, attempt = u.attempt, assignee = u.assignee, lease_expires_at = u.lease_expires_at, reason = u.reason,
       rejected_by = u.rejected_by::text[], labelled_by = u.labelled_by::text[], version = t.version + 1, updated_at = now()
     FROM unnest($1::text[], $2::text[], $3::int[], $4::text[], $5::timestamptz[], $6::text[], $7::int[], $8::text[], $9::text[]) AS u(task_id, status, attempt, assignee, lease_expires_at, reason, version, rejected_by, labelled_by)
     WHERE t.task_id = ANY($1::text[]) AND t.task_id = u.task_id AND t.version = u.version`,
    [
      updates.map((u) => u.next.taskId),
      updates.map((u) => u.next.status),
      updates.map((u) => u.next.attempt),
      updates.map((u) => u.next.assignee),
      updates.map((u) => u.next.leaseExpiresAt),
      updates.map((u) => u.next.reason),
      updates.map((u) => u.version),
      updates.map((u) => pgArray(u.next.rejectedBy)),
      updates.map((u) => pgArray(u.next.labelledBy)),
    ],
  );
  if (result.rowCount !== updates.length) {
    throw new ServiceKitError(ServiceKitErrors.CONCURRENT_UPDATE, `${updates.length - (result.rowCount ?? 0)} of ${updates.length} tasks changed concurrently`, { retriable: true });
  }
}

/** Where a page of `listTasks` ends; what a route decodes from its cursor and passes back as `after`. */
export const TaskListPosition = z.object({ createdAt: TimestampKey, taskId: z.string().min(1).max(64) });
export type TaskListPosition = z.infer<typeof TaskListPosition>;

export interface TaskListFilter {
  /** The projects the caller may see; an empty list matches nothing. */
  readonly projectIds: readonly string[] | 'all';
  /** One status or any of several; an empty list matches nothing. */
  readonly status?: readonly string[] | string;
  readonly limit: number;
  /** The `next` of the previous page: tasks strictly after it in (created_at, task_id) order. */
  readonly after?: TaskListPosition;
}

/**
 * A page of tasks in (created_at, task_id) order. `next` is null exactly when no task follows the
 * page. Each (project, status) pair of the filter is read as its own ordered index range of at
 * most limit + 1 rows and the ranges merged: `project_id = ANY(...)` would instead read every
 * remaining task of those projects and sort them, on every page.
 */
export async function listTasks(db: Queryable, filter: TaskListFilter): Promise<{ items: TaskRecord[]; next: TaskListPosition | null }> {
  const query = keysetQuery({
    table: 'tasks',
    select: `${timestampKeySql('tasks.created_at')} AS created_at_key`,
    order: [{ column: 'created_at', type: 'timestamptz' }, { column: 'task_id', type: 'text' }],
    partitions: [
      { column: 'project_id', type: 'uuid', values: filter.projectIds === 'all' ? undefined : filter.projectIds },
      { column: 'status', type: 'text', values: typeof filter.status === 'string' ? [filter.status] : filter.status },
    ],
    ...(filter.after ? { after: [filter.after.createdAt, filter.after.taskId] } : {}),
    limit: filter.limit,
  });
  if (!query) return { items: [], next: null };
  const { rows } = await db.query<TaskRow & { created_at_key: string }>(query.text, query.values);
  const { items, next } = keysetPage(rows, filter.limit, (last) => ({ createdAt: last.created_at_key, taskId: last.task_id }));
  return { items: items.map(toState), next };
}

/**
 * Saves with compare-and-set on `version`: `previous` is the version that was loaded. Losing the
 * race is a retriable conflict (the consumer retries; HTTP answers 409). Returns the row as saved
 * (its version and timestamps), so an answer needs no second read.
 */
export async function saveTask(db: Queryable, next: TaskState, previousVersion: number | null): Promise<TaskRecord> {
  if (previousVersion === null) {
    const { rows } = await db.query<TaskRow>(
      `INSERT INTO tasks (task_id, project_id, title, data_uri, task_number, status, attempt, assignee, lease_expires_at, reason, rejected_by, labelled_by, version)
       VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11::text[], $12::text[], 1) RETURNING *`,
      [next.taskId, next.projectId, next.title, next.dataUri, next.taskNumber, next.status, next.attempt, next.assignee, next.leaseExpiresAt, next.reason, pgArray(next.rejectedBy), pgArray(next.labelledBy)],
    );
    return toState(rows[0] as TaskRow);
  }
  const { rows } = await db.query<TaskRow>(
    `UPDATE tasks SET status = $2, attempt = $3, assignee = $4, lease_expires_at = $5, reason = $6, rejected_by = $8::text[], labelled_by = $9::text[], version = version + 1, updated_at = now()
     WHERE task_id = $1 AND version = $7 RETURNING *`,
    [next.taskId, next.status, next.attempt, next.assignee, next.leaseExpiresAt, next.reason, previousVersion, pgArray(next.rejectedBy), pgArray(next.labelledBy)],
  );
  const [saved] = rows;
  if (!saved) {
    throw new ServiceKitError(ServiceKitErrors.CONCURRENT_UPDATE, `task ${next.taskId} changed concurrently`, { retriable: true });
  }
  return toState(saved);
}

/** Locks assigned tasks whose lease ended more than `graceMs` ago; other instances skip them. */
export async function claimExpiredLeases(tx: Queryable, limit: number, now: Date, graceMs: number): Promise<string[]> {
  const { rows } = await tx.query<{ task_id: string }>(
    `SELECT task_id FROM tasks WHERE status = 'assigned' AND lease_expires_at <= $1::timestamptz - ($2::bigint * interval '1 millisecond')
     ORDER BY lease_expires_at LIMIT $3 FOR UPDATE SKIP LOCKED`,
    [now.toISOString(), graceMs, limit],
  );
  return rows.map((r) => r.task_id);
}

/**
 * The project's key for task numbers: the first task of a project registers it (or the default);
 * later tasks must use the same one. Returns null when `requested` contradicts the registered key.
 */
export async function projectKeyFor(tx: Queryable, projectId: string, requested: string | undefined, fallback: string): Promise<{ key: string } | { conflict: string }> {
  const registered = async () => (await tx.query<{ project_key: string }>('SELECT project_key FROM project_keys WHERE project_id = $1', [projectId])).rows[0]?.project_key;
  // Every task but a project's first finds the key with this one read, and writes nothing.
  let key = await registered();
  if (key === undefined) {
    await tx.query('INSERT INTO project_keys (project_id, project_key) VALUES ($1, $2) ON CONFLICT (project_id) DO NOTHING', [projectId, requested ?? fallback]);
    // Read again: a concurrent first task of the project may have registered another key first.
    key = (await registered()) ?? fallback;
  }
  return requested !== undefined && requested !== key ? { conflict: key } : { key };
}
