import type { ProjectId, TaskCreated, TaskId } from '@labelflow/contracts';
import type { EventDraft, Rejection } from '@labelflow/service-kit';
import type { ImportLine, LineErrorCode } from './parse';

export const ImportStatus = { running: 'running', completed: 'completed', interrupted: 'interrupted' } as const;
export type ImportStatus = (typeof ImportStatus)[keyof typeof ImportStatus];

/** Stored per job: the first this many rejected lines, with their numbers. */
export const MAX_REPORTED_ERRORS = 1_000;

export interface LineError {
  readonly line: number;
  readonly code: LineErrorCode;
  readonly message: string;
}

/** An import job as stored: progress as of its last committed batch. */
export interface ImportJob {
  readonly projectId: ProjectId;
  readonly importId: string;
  readonly createdBy: string;
  readonly status: ImportStatus;
  /** Physical lines (blank ones included) the committed batches covered; a re-upload resumes after them. */
  readonly position: number;
  /** Digest of those lines (see `createPrefixDigest`). */
  readonly prefixSha256: string;
  readonly lines: number;
  readonly created: number;
  readonly alreadyPresent: number;
  readonly rejected: number;
  readonly errors: readonly LineError[];
  readonly errorsTruncated: boolean;
  readonly uploads: number;
  /** The upload holding the job, while one does. */
  readonly owner: string | null;
  readonly leaseExpiresAt: Date | null;
  readonly startedAt: Date;
  readonly updatedAt: Date;
  readonly completedAt: Date | null;
}

export const ImportRejections = { IMPORT_IN_PROGRESS: 'IMPORT_IN_PROGRESS' } as const;
export type ImportRejection = Rejection<(typeof ImportRejections)[keyof typeof ImportRejections]>;

export interface StartUpload {
  readonly projectId: ProjectId;
  readonly importId: string;
  readonly createdBy: string;
  readonly owner: string;
  readonly now: Date;
  readonly leaseMs: number;
  readonly emptyPrefix: string;
}

/**
 * Who may run an upload of the job now: a new job starts; a job nobody holds (interrupted,
 * completed, or held by an upload whose lease lapsed: its instance died) is taken over and resumes
 * where its committed batches stopped. A job another upload holds is refused.
 */
export function decideStart(command: StartUpload, job: ImportJob | null): { ok: true; job: ImportJob; resumed: boolean } | { ok: false; reason: ImportRejection } {
  const leaseExpiresAt = new Date(command.now.getTime() + command.leaseMs);
  if (!job) {
    return {
      ok: true,
      resumed: false,
      job: {
        projectId: command.projectId,
        importId: command.importId,
        createdBy: command.createdBy,
        status: ImportStatus.running,
        position: 0,
        prefixSha256: command.emptyPrefix,
        lines: 0,
        created: 0,
        alreadyPresent: 0,
        rejected: 0,
        errors: [],
        errorsTruncated: false,
        uploads: 1,
        owner: command.owner,
        leaseExpiresAt,
        startedAt: command.now,
        updatedAt: command.now,
        completedAt: null,
      },
    };
  }
  const held = job.status === ImportStatus.running && job.leaseExpiresAt !== null && job.leaseExpiresAt.getTime() > command.now.getTime();
  // This very upload's hold: its start committed, but the answer to COMMIT was lost and the start
  // is being retried. It keeps the job as it took it, rather than wait out its own lease.
  if (held && job.owner === command.owner) return { ok: true, resumed: job.uploads > 1, job: { ...job, leaseExpiresAt, updatedAt: command.now } };
  if (held) return { ok: false, reason: { code: 'IMPORT_IN_PROGRESS', message: `import ${job.importId} is being uploaded right now; retry when that upload has ended` } };
  return { ok: true, resumed: true, job: { ...job, status: ImportStatus.running, uploads: job.uploads + 1, owner: command.owner, leaseExpiresAt, updatedAt: command.now } };
}

/**
 * A job as its readers see it: a `running` job whose upload stopped giving signs of life is
 * `interrupted`, unless it had completed before (a re-upload of a finished file that died changes
 * nothing, so the job stays completed).
 */
export function statusAt(job: ImportJob, now: Date): ImportStatus {
  if (job.status === ImportStatus.running && (job.leaseExpiresAt === null || job.leaseExpiresAt.getTime() <= now.getTime())) return job.completedAt !== null ? ImportStatus.completed : ImportStatus.interrupted;
  return job.status;
}

export interface ImportSummary {
  readonly importId: string;
  readonly projectId: string;
  readonly status: ImportStatus;
  readonly lines: number;
  readonly created: number;
  readonly alreadyPresent: number;
  readonly rejected: number;
  readonly errors: readonly LineError[];
  readonly errorsTruncated: boolean;
  readonly uploads: number;
  readonly startedAt: string;
  readonly updatedAt: string;
  readonly completedAt: string | null;
}

export const summaryOf = (job: ImportJob, now: Date): ImportSummary => ({
  importId: job.importId,
  projectId: job.projectId,
  status: statusAt(job, now),
  lines: job.lines,
  created: job.created,
  alreadyPresent: job.alreadyPresent,
  rejected: job.rejected,
  errors: job.errors,
  errorsTruncated: job.errorsTruncated,
  uploads: job.uploads,
  startedAt: job.startedAt.toISOString(),
  updatedAt: job.updatedAt.toISOString(),
  completedAt: job.completedAt?.toISOString() ?? null,
});

/** The lines of one batch as read: valid tasks in file order, and the rejected lines. */
export interface BatchLines {
  readonly tasks: readonly { readonly line: number; readonly task: ImportLine }[];
  readonly errors: readonly LineError[];
}

/**
 * The tasks a batch offers the insert: the first line of each external id in the batch. A later
 * line with the same id (in this batch or a later one) creates nothing, whatever its title and
 * data: the first write wins.
 */
export function distinctTasks(batch: BatchLines): ImportLine[] {
  const seen = new Set<string>();
  const distinct: ImportLine[] = [];
  for (const { task } of batch.tasks) {
    if (seen.has(task.externalId)) continue;
    seen.add(task.externalId);
    distinct.push(task);
  }
  return distinct;
}

/** A task the batch's insert created, with the id and number it was given. */
export interface CreatedTask {
  readonly taskId: TaskId;
  readonly externalId: string;
  readonly title: string;
  readonly dataUri: string;
  readonly taskNumber: string;
}

/** One `TaskCreated` per task the insert created, none for a line that met an existing task. */
export const createdEvents = (projectId: ProjectId, createdBy: string, created: readonly CreatedTask[]): EventDraft<TaskCreated>[] =>
  created.map((t) => ({
    type: 'TaskCreated',
    version: 1,
    taskId: t.taskId,
    projectId,
    attempt: 1,
    payload: { title: t.title, dataUri: t.dataUri, taskNumber: t.taskNumber, createdBy, externalId: t.externalId },
  }));

/**
 * What a committed batch adds to its job; errors beyond the report's cap are counted, not kept.
 * How many of its `tasks` were created (and so how many were already present) is settled by the
 * statement that writes them.
 */
export function progressOf(job: ImportJob, batch: BatchLines, position: number, prefixSha256: string) {
  const room = Math.max(0, MAX_REPORTED_ERRORS - job.errors.length);
  const kept = batch.errors.slice(0, room);
  return {
    position,
    prefixSha256,
    lines: batch.tasks.length + batch.errors.length,
    tasks: batch.tasks.length,
    rejected: batch.errors.length,
    errors: kept,
    errorsTruncated: kept.length < batch.errors.length,
  };
}
export type Progress = ReturnType<typeof progressOf>;
