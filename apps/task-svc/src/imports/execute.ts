import type { ProjectId, TaskId } from '@labelflow/contracts';
import type { SegmentAllocator } from '@labelflow/idgen';
import { formatTaskNumber } from '@labelflow/idgen';
import { isTransientDbError, withTransaction, type Pool, type Prepare, type PreparedEvents } from '@labelflow/service-kit';
import type { Logger, TraceHeaders } from '@labelflow/telemetry';
import { projectKeyFor } from '../tasks/repository';
import { createdEvents, decideStart, distinctTasks, ImportStatus, MAX_REPORTED_ERRORS, progressOf, type BatchLines, type CreatedTask, type ImportJob, type LineError } from './decide';
import { ImportError, ImportErrors } from './errors';
import { createLineSplitter, createPrefixDigest, EMPTY_PREFIX, readLine, type ImportLine, type RawLine } from './parse';
import { loadImport, releaseImport, renewImportLease, saveStartedImport, writeImportBatch } from './repository';

/** Task numbers of a project whose first task named no key read `TASK-1`, `TASK-2`, ... (as for `POST /tasks`). */
const DEFAULT_PROJECT_KEY = 'TASK';

export interface ImportSettings {
  /** Valid lines per batch transaction. */
  readonly batchSize: number;
  readonly maxLineBytes: number;
  readonly leaseMs: number;
  /** Tries of a batch on transient errors. */
  readonly attempts: number;
  readonly lockTimeoutMs: number;
}

export interface ImportDeps {
  readonly pool: Pool;
  /** Stamps, checks and serializes a batch's TaskCreated events while the batch before it is written. */
  readonly prepare: Prepare;
  readonly nextId: () => Promise<string>;
  readonly newUuid: () => string;
  /** Per-project task numbers (shared by every upload of this instance). */
  readonly numbers: SegmentAllocator;
  readonly now: () => Date;
  readonly logger: Logger;
  readonly settings: ImportSettings;
  /** Waits between retries of a batch. */
  readonly sleep: (ms: number) => Promise<void>;
  /** A number in [0, 1) for the retries' jitter; Math.random when absent (tests pin it). */
  readonly random?: () => number;
  /** Told of every committed batch (the routes turn it into metrics). */
  readonly onBatch?: (outcome: { readonly seconds: number; readonly lines: number; readonly created: number; readonly alreadyPresent: number; readonly rejected: number }) => void;
}

export interface ImportUpload {
  readonly projectId: ProjectId;
  readonly importId: string;
  readonly createdBy: string;
  /** The request body, read as it arrives: it is only pulled from while no batch waits to be written. */
  readonly body: AsyncIterable<Buffer | string>;
}

/**
 * The trace an imported task's events continue: none. Each task's saga starts a trace of its own
 * (at the relay's publish), where continuing the upload's would put a million sagas in one trace
 * and link every one of their timelines to it. The `import:<importId>` causation id still says
 * where each task came from.
 */
const OWN_TRACE: TraceHeaders = {};

/** A batch cut from the file, with where in the file it ends. */
interface Cut extends BatchLines {
  readonly position: number;
  readonly prefixSha256: string;
  readonly final: boolean;
}

const retriable = (error: unknown) => isTransientDbError(error) || (error instanceof Error && (error as { retriable?: unknown }).retriable === true);

/**
 * Runs one upload of an import job: takes hold of the job, reads the body line by line, and writes
 * it in batches, one transaction each (tasks, their TaskCreated in the outbox, the job's progress).
 * While a batch is being written at most one more is read, then the body is not pulled from
 * until the write ends: the client's TCP window closes and memory stays bounded whatever the size.
 * A re-upload skips the lines the job's committed batches covered, once it has checked that they
 * are the same lines, so the final counts are those of one uninterrupted upload.
 */
export async function runImport(deps: ImportDeps, upload: ImportUpload): Promise<ImportJob> {
  const { settings } = deps;
  const owner = deps.newUuid();
  const started = await withRetries(deps, () =>
    withTransaction(deps.pool, async (tx) => {
      const job = await loadImport(tx, upload.projectId, upload.importId, true);
      const decision = decideStart({ ...upload, owner, now: deps.now(), leaseMs: settings.leaseMs, emptyPrefix: EMPTY_PREFIX }, job);
      if (!decision.ok) throw new ImportError(ImportErrors.IMPORT_IN_PROGRESS, decision.reason.message);
      if (!(await saveStartedImport(tx, decision.job, job === null))) throw new ImportError(ImportErrors.IMPORT_IN_PROGRESS, `import ${upload.importId} is being uploaded right now`);
      const registered = await projectKeyFor(tx, upload.projectId, undefined, DEFAULT_PROJECT_KEY);
      return { job: decision.job, projectKey: 'key' in registered ? registered.key : DEFAULT_PROJECT_KEY };
    }),
  );
  let job = started.job;
  const wasCompleted = job.completedAt !== null;
  let wroteBatch = false;

  // The lease is the job's sign of life while the client is slow to send: without it a stalled
  // but healthy upload would look dead and could be taken over.
  const renew = setInterval(() => {
    renewImportLease(deps.pool, job, owner, new Date(deps.now().getTime() + settings.leaseMs)).catch((error: unknown) => deps.logger.warn({ err: error, importId: job.importId }, 'import lease renewal failed'));
  }, Math.max(100, Math.floor(settings.leaseMs / 3)));
  renew.unref();

  const resumeAt = job.position;
  const expectedPrefix = job.prefixSha256;
  const splitter = createLineSplitter(settings.maxLineBytes);
  const digest = createPrefixDigest();
  let position = 0;
  let tasks: { line: number; task: ImportLine }[] = [];
  let errors: LineError[] = [];
  // Messages the job's report still has room for (progressOf keeps the first ones): the lines past
  // it are counted without theirs, so a file of bad lines costs no memory for what is never stored.
  let reportRoom = MAX_REPORTED_ERRORS - job.errors.length;
  let writing: Promise<void> = Promise.resolve();
  let failure: unknown;

  const mismatch = () => new ImportError(ImportErrors.IMPORT_CONTENT_MISMATCH, `the file differs from the one import ${job.importId} was started with in its first ${resumeAt} lines; upload the same file, or use a new importId`);

  /** Takes one line; returns a batch when this line completed one. */
  const take = (line: RawLine): Cut | undefined => {
    position = line.number;
    digest.add(line);
    if (position <= resumeAt) {
      if (position === resumeAt && digest.digest() !== expectedPrefix) throw mismatch();
      return undefined;
    }
    const verdict = readLine(line, settings.maxLineBytes);
    if (verdict.kind === 'task') tasks.push({ line: line.number, task: verdict.task });
    else if (verdict.kind === 'rejected') errors.push({ line: line.number, code: verdict.code, message: reportRoom-- > 0 ? verdict.message : '' });
    // A file of mostly bad lines still commits its progress now and then.
    if (tasks.length >= settings.batchSize || tasks.length + errors.length >= 4 * settings.batchSize) return cut(false);
    return undefined;
  };
  const cut = (final: boolean): Cut => {
    const batch: Cut = { tasks, errors, position, prefixSha256: digest.digest(), final };
    tasks = [];
    errors = [];
    return batch;
  };
  /**
   * Prepares this batch at once (ids, numbers, its TaskCreated events stamped, checked and
   * serialized): that CPU work overlaps the transaction of the batch before, which is waited for
   * next. Then starts writing this one.
   */
  const enqueue = async (batch: Cut) => {
    const prepared = prepareBatch(batch);
    // Awaited below or by writeBatch; until then a failure must not count as unhandled.
    prepared.catch(() => undefined);
    await writing;
    if (failure !== undefined) throw failure;
    writing = writeBatch(batch, prepared).then(
      (saved) => {
        job = saved;
        wroteBatch = true;
      },
      (error: unknown) => {
        failure = error;
      },
    );
  };

  // Task numbers drawn for this upload and not yet given to a created task. A batch takes a number
  // for every one of its distinct lines, but only the rows the insert creates keep theirs; the
  // rest come back here for a later batch. So lines already present cost no number, and no query
  // is needed before the insert to find them; at most two batches' worth (the one written last and
  // the one prepared meanwhile) is left as a gap at the end.
  const spareNumbers: number[] = [];

  interface PreparedBatch {
    readonly rows: readonly CreatedTask[];
    readonly numbers: readonly number[];
    readonly events: PreparedEvents;
  }

  const prepareBatch = (batch: Cut): Promise<PreparedBatch> => {
    const candidates = distinctTasks(batch);
    // Task ids are drawn once per batch and kept across retries; an id whose line met an existing
    // task is simply never used (ids are 64-bit and time-ordered, not a sequence anyone reads).
    const taskIds: TaskId[] = [];
    const numbers = spareNumbers.splice(0, candidates.length);
    return withRetries(deps, async () => {
      while (taskIds.length < candidates.length) taskIds.push((await deps.nextId()) as TaskId);
      while (numbers.length < candidates.length) numbers.push(await deps.numbers.next(upload.projectId));
      // Both lists were just filled to the candidates' length.
      const rows: CreatedTask[] = candidates.map((task, i) => ({
        taskId: taskIds[i] as TaskId,
        taskNumber: formatTaskNumber(started.projectKey, numbers[i] as number),
        externalId: task.externalId,
        title: task.title,
        dataUri: task.dataUri,
      }));
      // Every line passed ImportLine, whose limits are TaskCreated's (events.unit.spec.ts proves it
      // over random lines at and past them): checking each event again would only cost time.
      const events = await deps.prepare(createdEvents(upload.projectId, upload.createdBy, rows), `import:${upload.importId}`, { check: 'first', trace: OWN_TRACE });
      return { rows, numbers, events };
    });
  };

  /**
   * A batch the job's row did not let write: either an earlier try of it committed and only its
   * answer was lost (then the job is recorded at its end, and this try wrote nothing), or another
   * upload holds the job now. Which numbers the earlier try kept is unknown: the batch's are all
   * given up.
   */
  const notWritten = async (batch: Cut, rows: readonly CreatedTask[]) => {
    const current = await loadImport(deps.pool, upload.projectId, upload.importId);
    const recordedBefore = current !== null && current.position === batch.position && (current.owner === owner || (batch.final && current.status === ImportStatus.completed));
    return { saved: recordedBefore ? current : null, used: new Set(rows.map((t) => t.taskNumber)) };
  };

  const writeBatch = async (batch: Cut, ready: Promise<PreparedBatch>): Promise<ImportJob> => {
    const startedAt = performance.now();
    const { rows, numbers, events } = await ready;
    return withRetries(deps, async () => {
      const progress = progressOf(job, batch, batch.position, batch.prefixSha256);
      const leaseExpiresAt = new Date(deps.now().getTime() + settings.leaseMs);
      const written = await writeImportBatch(deps.pool, {
        projectId: upload.projectId,
        importId: upload.importId,
        owner,
        from: job.position,
        tasks: rows,
        outbox: events.outbox,
        progress,
        leaseExpiresAt,
        complete: batch.final,
        lockTimeoutMs: settings.lockTimeoutMs,
      });
      const outcome = written.job
        ? { saved: written.job, used: new Set(rows.filter((t) => written.created.has(t.taskId)).map((t) => t.taskNumber)) }
        : await notWritten(batch, rows);
      if (outcome.saved) {
        spareNumbers.push(...numbers.filter((n) => !outcome.used.has(formatTaskNumber(started.projectKey, n))));
        const created = outcome.saved.created - job.created;
        deps.onBatch?.({ seconds: (performance.now() - startedAt) / 1000, lines: batch.tasks.length + batch.errors.length, created, alreadyPresent: batch.tasks.length - created, rejected: batch.errors.length });
        return outcome.saved;
      }
      throw new ImportError(ImportErrors.IMPORT_TAKEN_OVER, `import ${upload.importId} was taken over by another upload after this one stalled`);
    });
  };

  try {
    try {
      for await (const chunk of upload.body) {
        for (const line of splitter.push(typeof chunk === 'string' ? Buffer.from(chunk) : chunk)) {
          const batch = take(line);
          if (batch) await enqueue(batch);
        }
        if (failure !== undefined) throw failure;
      }
    } catch (error) {
      if (error instanceof ImportError || error === failure) throw error;
      throw new ImportError(ImportErrors.IMPORT_INTERRUPTED, `the upload of import ${upload.importId} ended early: ${(error as Error).message}`, { cause: error });
    }
    for (const line of splitter.end()) {
      const batch = take(line);
      if (batch) await enqueue(batch);
    }
    if (position < resumeAt) throw mismatch();
    await enqueue(cut(true));
    await writing;
    if (failure !== undefined) throw failure;
    return job;
  } catch (error) {
    // The batch in flight ends either way: what committed stays, and the job says how far it got.
    await writing;
    const status = wasCompleted && !wroteBatch ? ImportStatus.completed : ImportStatus.interrupted;
    await releaseImport(deps.pool, job, owner, status).catch((releaseError: unknown) =>
      deps.logger.warn({ err: releaseError, importId: upload.importId }, 'could not release the import job; its lease will lapse'),
    );
    if (error instanceof ImportError) throw error;
    if (retriable(error)) throw new ImportError(ImportErrors.IMPORT_STORE_UNAVAILABLE, `the database is unavailable; batches committed so far stay, upload again with the same importId to resume`, { cause: error, retriable: true });
    throw error;
  } finally {
    clearInterval(renew);
  }
}

/** Runs `attempt` again after transient failures, with backoff (100 ms doubling, at most 2 s). */
async function withRetries<T>(deps: ImportDeps, attempt: () => Promise<T>): Promise<T> {
  for (let tries = 1, delay = 100; ; tries += 1, delay = Math.min(delay * 2, 2_000)) {
    try {
      return await attempt();
    } catch (error) {
      if (!retriable(error) || tries >= deps.settings.attempts) {
        // The cause (host, port, driver text) goes to the log with the route's warning, not to the caller.
        if (retriable(error)) throw new ImportError(ImportErrors.IMPORT_STORE_UNAVAILABLE, `the database stayed unavailable after ${tries} tries; re-upload the file with the same importId to finish the import`, { cause: error, retriable: true });
        throw error;
      }
      deps.logger.warn({ err: error, tries }, 'import batch failed on a transient error; retrying');
      await deps.sleep(delay + Math.floor((deps.random ?? Math.random)() * delay * 0.2));
    }
  }
}
