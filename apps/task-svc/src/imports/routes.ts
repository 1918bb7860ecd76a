import { setTimeout as sleep } from 'node:timers/promises';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { Permission } from '@labelflow/auth';
import { ProjectId } from '@labelflow/contracts';
import { createSegmentAllocator } from '@labelflow/idgen';
import { guard, HttpError, parseInput, type ServiceContext } from '@labelflow/service-kit';
import { z } from 'zod';
import type { TaskSvcConfig } from '../config';
import { summaryOf } from './decide';
import { ImportError, ImportErrors, type ImportErrorCode } from './errors';
import { runImport, type ImportDeps } from './execute';
import { withIdleLimit } from './idle-limit';
import { loadImport } from './repository';

const NDJSON = 'application/x-ndjson';
const ImportParams = z.object({ projectId: ProjectId });
const ImportQuery = z.strictObject({ importId: z.uuid() });
const ImportJobParams = z.object({ projectId: ProjectId, importId: z.uuid() });

const statusFor: Record<ImportErrorCode, number> = {
  IMPORT_IN_PROGRESS: 409,
  IMPORT_CONTENT_MISMATCH: 409,
  IMPORT_TAKEN_OVER: 409,
  IMPORT_STORE_UNAVAILABLE: 503,
  // Admission, not failure: nothing was read, and the same upload is welcome in a moment. A 5xx
  // would make every throttled uploader look like an outage (HttpServerErrors).
  IMPORT_BUSY: 429,
  // Nobody hears it: the client hung up. For the logs and metrics.
  IMPORT_INTERRUPTED: 400,
};

const projectNotFound = (projectId: string) => ({ code: 'PROJECT_NOT_FOUND', message: `project ${projectId} does not exist` });
const importNotFound = (importId: string) => ({ code: 'IMPORT_NOT_FOUND', message: `import ${importId} does not exist` });
const mediaType = (request: FastifyRequest) => (request.headers['content-type'] ?? '').split(';')[0]?.trim().toLowerCase();
/** The charset parameter of the Content-Type, lower-cased; undefined when none is given. */
const charsetOf = (request: FastifyRequest) =>
  (request.headers['content-type'] ?? '')
    .split(';')
    .slice(1)
    .map((p) => p.trim().toLowerCase())
    .find((p) => p.startsWith('charset='))
    ?.slice('charset='.length)
    .replace(/^"|"$/g, '');


/** Bulk import: `POST /projects/:projectId/tasks/import?importId=` (NDJSON, streamed) and its progress. */
export function importRoutes(app: FastifyInstance, ctx: ServiceContext<TaskSvcConfig>): void {
  const { config } = ctx;
  const batches = ctx.metrics.histogram('import_batch_seconds', 'Bulk import: time to write one batch (tasks, outbox, progress), retries included', [], [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10]);
  const lines = ctx.metrics.counter('import_lines_total', 'Bulk import: lines by outcome', ['outcome']);
  const uploads = ctx.metrics.counter('import_uploads_total', 'Bulk import: uploads by how they ended', ['outcome']);
  const deps: ImportDeps = {
    pool: ctx.pool,
    prepare: ctx.prepare,
    nextId: ctx.nextId,
    newUuid: ctx.newUuid,
    // A segment per batch: numbering a batch costs one round trip at most.
    numbers: createSegmentAllocator({ pool: ctx.pool, segmentSize: Math.max(100, config.IMPORT_BATCH_SIZE) }),
    now: ctx.now,
    logger: ctx.logger,
    settings: {
      batchSize: config.IMPORT_BATCH_SIZE,
      maxLineBytes: config.IMPORT_MAX_LINE_BYTES,
      leaseMs: config.IMPORT_LEASE_MS,
      attempts: config.IMPORT_BATCH_ATTEMPTS,
      lockTimeoutMs: config.IMPORT_LOCK_TIMEOUT_MS,
    },
    sleep: (ms) => sleep(ms),
    onBatch: (outcome) => {
      batches.observe({}, outcome.seconds);
      lines.inc({ outcome: 'created' }, outcome.created);
      lines.inc({ outcome: 'already_present' }, outcome.alreadyPresent);
      lines.inc({ outcome: 'rejected' }, outcome.rejected);
    },
  };

  /** Everything an upload can be refused for, before a byte of its body is read. */
  const admit = async (request: FastifyRequest) => {
    const { projectId } = parseInput(ImportParams, request.params, 'path');
    guard(request, Permission.taskCreate, projectId, projectNotFound(projectId));
    if (mediaType(request) !== NDJSON) throw new HttpError(415, 'IMPORT_UNSUPPORTED_MEDIA_TYPE', `send the tasks as ${NDJSON}: one JSON object per line`);
    // A compressed or non-UTF-8 body would be read as lines of garbage, every one rejected.
    const encoding = (request.headers['content-encoding'] ?? 'identity').trim().toLowerCase();
    if (encoding !== 'identity') throw new HttpError(415, 'IMPORT_UNSUPPORTED_MEDIA_TYPE', `send the file uncompressed: Content-Encoding ${encoding} is not supported`);
    const charset = charsetOf(request);
    if (charset !== undefined && charset !== 'utf-8' && charset !== 'utf8') throw new HttpError(415, 'IMPORT_UNSUPPORTED_MEDIA_TYPE', `send the file as UTF-8: charset ${charset} is not supported`);
    parseInput(ImportQuery, request.query, 'query');
  };

  // Its own scope: the NDJSON parser hands the raw request stream to this route alone, unbuffered
  // and not subject to the body limit, so the route can read it as fast as it writes.
  void app.register(async (scope) => {
    scope.addContentTypeParser(NDJSON, (_request, payload, done) => done(null, payload));
    // An answer sent before the body was read to its end closes the connection: otherwise Node
    // would go on reading (and dropping) the rest of a file that may be gigabytes long.
    // Only the upload's: a client polling progress keeps its connection through a 404.
    scope.addHook('onSend', async (request, reply, payload) => {
      if (reply.statusCode >= 400 && request.method === 'POST') reply.header('connection', 'close');
      return payload;
    });

    let running = 0;
    const runningIn = new Map<string, number>();
    // The same bound per caller: someone with roles in several projects cannot take every slot either.
    const runningBy = new Map<string, number>();
    const perProject = Math.min(config.IMPORT_MAX_PER_PROJECT, config.IMPORT_MAX_CONCURRENT);
    const release = (counts: Map<string, number>, key: string) => {
      const left = (counts.get(key) ?? 1) - 1;
      if (left > 0) counts.set(key, left);
      else counts.delete(key);
    };
    // A shutdown ends the uploads under way as a dropped connection would: their committed batches
    // stay, the job is left interrupted with its hold released, and the client resumes with the
    // same importId (on another instance, or this one once it is back). Waiting for the files to
    // end instead would let a long one outlast the close budget while the consumer and the relay
    // close. What is waited for, briefly, is each upload's batch in flight and its release: the
    // pool closes after this, and a release it refused would leave the job held by a dead upload
    // until its lease lapses, a resume answered 409 meanwhile.
    const uploading = new Map<FastifyRequest, Promise<void>>();
    scope.addHook('preClose', async () => {
      for (const request of uploading.keys()) request.raw.destroy(new Error('the service is shutting down'));
      let bound: NodeJS.Timeout | undefined;
      await Promise.race([Promise.all(uploading.values()), new Promise((resolve) => (bound = setTimeout(resolve, config.IMPORT_CLOSE_WAIT_MS)))]);
      clearTimeout(bound);
    });
    scope.post('/projects/:projectId/tasks/import', { onRequest: admit }, async (request, reply: FastifyReply) => {
      const { projectId } = parseInput(ImportParams, request.params, 'path');
      const { importId } = parseInput(ImportQuery, request.query, 'query');
      const caller = request.principal.subject;
      const ofProject = runningIn.get(projectId) ?? 0;
      const ofCaller = runningBy.get(caller) ?? 0;
      if (running >= config.IMPORT_MAX_CONCURRENT || ofProject >= perProject || ofCaller >= perProject) {
        uploads.inc({ outcome: ImportErrors.IMPORT_BUSY });
        reply.header('retry-after', '5');
        const what =
          ofProject >= perProject
            ? `project ${projectId} has ${ofProject} imports running on this instance already`
            : ofCaller >= perProject
              ? `you have ${ofCaller} imports running on this instance already`
              : `this instance runs ${running} imports already`;
        throw new HttpError(429, ImportErrors.IMPORT_BUSY, `${what}; upload again in a moment with the same importId`);
      }
      running++;
      runningIn.set(projectId, ofProject + 1);
      runningBy.set(caller, ofCaller + 1);
      let ended!: () => void;
      uploading.set(request, new Promise<void>((resolve) => (ended = resolve)));
      const body = withIdleLimit((request.body ?? []) as AsyncIterable<Buffer | string>, config.IMPORT_IDLE_MS, () => request.raw.destroy());
      try {
        const job = await runImport(deps, { projectId, importId, createdBy: request.principal.subject, body });
        uploads.inc({ outcome: 'completed' });
        return summaryOf(job, ctx.now());
      } catch (error) {
        if (!(error instanceof ImportError)) throw error;
        uploads.inc({ outcome: error.code });
        if (error.code === ImportErrors.IMPORT_STORE_UNAVAILABLE) {
          request.log.warn({ err: error.cause ?? error, importId }, 'import stopped: the database stayed unavailable');
          reply.header('retry-after', '1');
        }
        throw new HttpError(statusFor[error.code], error.code, error.message);
      } finally {
        running--;
        release(runningIn, projectId);
        release(runningBy, caller);
        uploading.delete(request);
        ended();
      }
    });

    // Progress while it runs (committed per batch); another project's caller gets the same 404 as for a missing import.
    scope.get('/projects/:projectId/imports/:importId', async (request) => {
      const { projectId, importId } = parseInput(ImportJobParams, request.params, 'path');
      guard(request, Permission.taskCreate, projectId, importNotFound(importId));
      const job = await loadImport(ctx.pool, projectId, importId);
      if (!job) throw new HttpError(404, 'IMPORT_NOT_FOUND', `import ${importId} does not exist`);
      return summaryOf(job, ctx.now());
    });
  });
}
