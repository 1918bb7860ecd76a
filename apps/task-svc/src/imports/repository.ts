import type { ProjectId } from '@labelflow/contracts';
import { appendBundleSql } from '@labelflow/outbox';
import { pgArray, runInOwnTransaction, type Pool, type Queryable } from '@labelflow/service-kit';
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

/**
 * Lets go of the job (the upload ended without completing it); nothing if another upload holds it
 * now. `completed` (a re-upload of a completed job that wrote nothing new) holds only while the
 * row still says so: a batch of new lines whose commit answer was lost cleared `completed_at`,
 * and the job is then interrupted, its file not imported to the end.
 */
export async function releaseImport(db: Queryable, job: Pick<ImportJob, 'projectId' | 'importId'>, owner: string, status: ImportStatus): Promise<void> {
  await db.query(
    `UPDATE imports SET status = CASE WHEN $4 = 'completed' AND completed_at IS NULL THEN 'interrupted' ELSE $4 END, owner = NULL, lease_expires_at = NULL, updated_at = now()
     WHERE project_id = $1 AND import_id = $2 AND owner = $3`,
    [
      job.projectId,
      job.importId,
      owner,
      status,
    ],
  );
}

export interface BatchWrite {
  readonly projectId: ProjectId;
  readonly importId: string;
  /** The upload that holds the job, and the position it last recorded: the batch is written only from there. */
  readonly owner: string;
  readonly from: number;
  /** The batch's distinct tasks, each with its id and number drawn. */
  readonly tasks: readonly CreatedTask[];
  /** Every task's TaskCreated outbox row (`serializeOutboxRows`); only the created tasks' are appended. */
  readonly outbox: { readonly rows: Buffer; readonly channel: string };
  readonly progress: Progress;
  readonly leaseExpiresAt: Date;
  readonly complete: boolean;
  /** Lock waits longer than this fail the batch (SQLSTATE 55P03), for its retries, instead of waiting forever. */
  readonly lockTimeoutMs: number;
}

/**
 * Writes a batch with one statement in a transaction of its own: the tasks whose external id the
 * project does not have yet, their TaskCreated events as outbox bundles (a row per 48 KiB of
 * events, about 85, not a row per task: the rows and their relay cost PostgreSQL more than the
 * tasks did), and the job's progress (created and already-present counts included), then wakes
 * the relay. One round trip (see `runInOwnTransaction`) where a transaction of three statements
 * took five: under load each round trip also waits for whatever the event loop is running when its
 * answer arrives.
 *
 * Only the holding upload may write, and only from the position it last recorded: the statement
 * first locks the job's row if it still says so (`claim`), and writes nothing otherwise (another
 * upload holds the job now, or this very batch is already recorded: a commit whose answer was
 * lost, then retried); the job is then null. Rows go in external id order, so two imports of
 * overlapping files wait on each other instead of deadlocking.
 */
export async function writeImportBatch(pool: Pool, w: BatchWrite): Promise<{ readonly job: ImportJob | null; readonly created: ReadonlySet<string> }> {
  const sorted = [...w.tasks].sort((a, b) => (a.externalId < b.externalId ? -1 : a.externalId > b.externalId ? 1 : 0));
  const { progress: p } = w;
  const { rows } = await runInOwnTransaction<ImportRow & { created_ids: string[] }>(
    pool,
    `WITH claim AS (
       SELECT 1 FROM imports WHERE project_id = $1 AND import_id = $9 AND owner = $10 AND position = $11 FOR UPDATE
     ), inserted AS (
       INSERT INTO tasks (task_id, project_id, title, data_uri, task_number, external_id, status, attempt, version)
       SELECT u.task_id, $1::uuid, u.title, u.data_uri, u.task_number, u.external_id, 'open', 1, 1
       FROM unnest($2::text[], $3::text[], $4::text[], $5::text[], $6::text[]) WITH ORDINALITY AS u(task_id, title, data_uri, task_number, external_id, n)
       WHERE EXISTS (SELECT 1 FROM claim)
       ORDER BY u.n
       ON CONFLICT (project_id, external_id) WHERE external_id IS NOT NULL DO NOTHING
       RETURNING task_id
     ), appended AS (
       ${appendBundleSql('$7', 'm.k IN (SELECT task_id FROM inserted)')}
     ), n AS (
       SELECT count(*)::bigint AS inserted_rows FROM inserted
     ), recorded AS (
       UPDATE imports SET position = $12, prefix_sha256 = $13, lines = lines + $14, created = created + n.inserted_rows, already_present = already_present + $15 - n.inserted_rows,
         rejected = rejected + $16, errors = errors || $17::jsonb, errors_truncated = errors_truncated OR $18, lease_expires_at = $19, updated_at = now(),
         status = CASE WHEN $20 THEN 'completed' ELSE status END,
         -- A batch with lines means the file went on past what completed before: complete again when
         -- the final one lands, not before. A final batch with none keeps the first completion.
         completed_at = CASE WHEN $14 > 0 THEN (CASE WHEN $20 THEN now() END) WHEN $20 THEN coalesce(completed_at, now()) ELSE completed_at END,
         owner = CASE WHEN $20 THEN NULL ELSE owner END
       FROM n
       WHERE project_id = $1 AND import_id = $9 AND EXISTS (SELECT 1 FROM claim)
       RETURNING imports.*
     )
     SELECT recorded.*, (SELECT coalesce(array_agg(task_id), '{}') FROM inserted) AS created_ids, pg_notify($8, '') AS woke FROM recorded`,
    [
      w.projectId,
      pgArray(sorted.map((t) => t.taskId)),
      pgArray(sorted.map((t) => t.title)),
      pgArray(sorted.map((t) => t.dataUri)),
      pgArray(sorted.map((t) => t.taskNumber)),
      pgArray(sorted.map((t) => t.externalId)),
      w.outbox.rows,
      w.outbox.channel,
      w.importId,
      w.owner,
      w.from,
      p.position,
      p.prefixSha256,
      p.lines,
      p.tasks,
      p.rejected,
      JSON.stringify(p.errors),
      p.errorsTruncated,
      w.complete ? null : w.leaseExpiresAt,
      w.complete,
    ],
    { lockTimeoutMs: w.lockTimeoutMs },
  );
  const row = rows[0];
  return row ? { job: toJob(row), created: new Set(row.created_ids) } : { job: null, created: new Set() };
}
