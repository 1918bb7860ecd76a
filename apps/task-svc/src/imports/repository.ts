import type { ProjectId } from '@labelflow/contracts';
import { pgArray, type Queryable } from '@labelflow/service-kit';
import type { CreatedTask, ImportJob, ImportStatus, LineError, Progress } from './decide';

interface ImportRow {
  project_id: string;
  import_id: string;
  created_by: string;
  status: string;
  position: string;
  prefix_sha256: string;
  lines: string;
  created: string;
  already_present: string;
  rejected: string;
  errors: LineError[];
  errors_truncated: boolean;
  uploads: number;
  owner: string | null;
  lease_expires_at: Date | null;
  started_at: Date;
  updated_at: Date;
  completed_at: Date | null;
}

const toJob = (r: ImportRow): ImportJob => ({
  projectId: r.project_id as ProjectId,
  importId: r.import_id,
  createdBy: r.created_by,
  status: r.status as ImportStatus,
  position: Number(r.position),
  prefixSha256: r.prefix_sha256,
  lines: Number(r.lines),
  created: Number(r.created),
  alreadyPresent: Number(r.already_present),
  rejected: Number(r.rejected),
  errors: r.errors,
  errorsTruncated: r.errors_truncated,
  uploads: r.uploads,
  owner: r.owner,
  leaseExpiresAt: r.lease_expires_at,
  startedAt: r.started_at,
  updatedAt: r.updated_at,
  completedAt: r.completed_at,
});

export async function loadImport(db: Queryable, projectId: ProjectId, importId: string, lock = false): Promise<ImportJob | null> {
  const { rows } = await db.query<ImportRow>(`SELECT * FROM imports WHERE project_id = $1 AND import_id = $2${lock ? ' FOR UPDATE' : ''}`, [projectId, importId]);
  return rows[0] ? toJob(rows[0]) : null;
}

/**
 * Saves the job an upload starts or takes over. Two uploads starting the same new job at once
 * both find no row: the second insert conflicts and finds nothing to return, and loses as if it
 * had seen the first upload's row.
 */
export async function saveStartedImport(tx: Queryable, job: ImportJob, isNew: boolean): Promise<boolean> {
  if (isNew) {
    const { rowCount } = await tx.query(
      `INSERT INTO imports (project_id, import_id, created_by, status, position, prefix_sha256, owner, lease_expires_at, started_at, updated_at)
       VALUES ($1, $2, $3, $4, 0, $5, $6, $7, $8, $8) ON CONFLICT (project_id, import_id) DO NOTHING`,
      [job.projectId, job.importId, job.createdBy, job.status, job.prefixSha256, job.owner, job.leaseExpiresAt, job.startedAt],
    );
    return rowCount === 1;
  }
  await tx.query(
    `UPDATE imports SET status = $3, uploads = $4, owner = $5, lease_expires_at = $6, updated_at = $7 WHERE project_id = $1 AND import_id = $2`,
    [job.projectId, job.importId, job.status, job.uploads, job.owner, job.leaseExpiresAt, job.updatedAt],
  );
  return true;
}

/** Keeps the upload's hold on the job; false when it no longer holds it. */
export async function renewImportLease(db: Queryable, job: Pick<ImportJob, 'projectId' | 'importId'>, owner: string, until: Date): Promise<boolean> {
  const { rowCount } = await db.query(`UPDATE imports SET lease_expires_at = $4 WHERE project_id = $1 AND import_id = $2 AND owner = $3 AND status = 'running'`, [
    job.projectId,
    job.importId,
    owner,
    until,
  ]);
  return rowCount === 1;
}

/** Lets go of the job (the upload ended without completing it); nothing if another upload holds it now. */
export async function releaseImport(db: Queryable, job: Pick<ImportJob, 'projectId' | 'importId'>, owner: string, status: ImportStatus): Promise<void> {
  await db.query(`UPDATE imports SET status = $4, owner = NULL, lease_expires_at = NULL, updated_at = now() WHERE project_id = $1 AND import_id = $2 AND owner = $3`, [
    job.projectId,
    job.importId,
    owner,
    status,
  ]);
}

/**
 * Inserts a batch's tasks with one statement; a task whose external id the project already has
 * (another import got there first) is skipped. Returns the tasks created. Rows go in external id
 * order, so two imports of overlapping files wait on each other instead of deadlocking.
 */
export async function insertImportedTasks(tx: Queryable, projectId: ProjectId, tasks: readonly CreatedTask[]): Promise<CreatedTask[]> {
  if (tasks.length === 0) return [];
  const sorted = [...tasks].sort((a, b) => (a.externalId < b.externalId ? -1 : a.externalId > b.externalId ? 1 : 0));
  const { rows } = await tx.query<{ task_id: string }>(
    `INSERT INTO tasks (task_id, project_id, title, data_uri, task_number, external_id, status, attempt, version)
     SELECT u.task_id, $1::uuid, u.title, u.data_uri, u.task_number, u.external_id, 'open', 1, 1
     FROM unnest($2::text[], $3::text[], $4::text[], $5::text[], $6::text[]) WITH ORDINALITY AS u(task_id, title, data_uri, task_number, external_id, n)
     ORDER BY u.n
     ON CONFLICT (project_id, external_id) WHERE external_id IS NOT NULL DO NOTHING
     RETURNING task_id`,
    [
      projectId,
      pgArray(sorted.map((t) => t.taskId)),
      pgArray(sorted.map((t) => t.title)),
      pgArray(sorted.map((t) => t.dataUri)),
      pgArray(sorted.map((t) => t.taskNumber)),
      pgArray(sorted.map((t) => t.externalId)),
    ],
  );
  const created = new Set(rows.map((r) => r.task_id));
  return tasks.filter((t) => created.has(t.taskId));
}

/**
 * Adds a committed batch to its job, in the batch's transaction. Only the holding upload may, and
 * only from the position it last recorded: false when another upload holds the job now, or when
 * this very batch is already recorded (a commit whose answer was lost, then retried).
 */
export async function recordImportProgress(
  tx: Queryable,
  job: Pick<ImportJob, 'projectId' | 'importId'>,
  owner: string,
  from: number,
  progress: Progress,
  leaseExpiresAt: Date,
  complete: boolean,
): Promise<ImportJob | null> {
  const { rows } = await tx.query<ImportRow>(
    `UPDATE imports SET position = $5, prefix_sha256 = $6, lines = lines + $7, created = created + $8, already_present = already_present + $9,
       rejected = rejected + $10, errors = errors || $11::jsonb, errors_truncated = errors_truncated OR $12, lease_expires_at = $13, updated_at = now(),
       status = CASE WHEN $14 THEN 'completed' ELSE status END, completed_at = CASE WHEN $14 THEN now() ELSE completed_at END,
       owner = CASE WHEN $14 THEN NULL ELSE owner END
     WHERE project_id = $1 AND import_id = $2 AND owner = $3 AND position = $4
     RETURNING *`,
    [
      job.projectId,
      job.importId,
      owner,
      from,
      progress.position,
      progress.prefixSha256,
      progress.lines,
      progress.created,
      progress.alreadyPresent,
      progress.rejected,
      JSON.stringify(progress.errors),
      progress.errorsTruncated,
      complete ? null : leaseExpiresAt,
      complete,
    ],
  );
  return rows[0] ? toJob(rows[0]) : null;
}
