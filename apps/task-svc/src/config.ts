import { z } from 'zod';
import { BaseConfig } from '@labelflow/service-kit';

export const TaskSvcConfig = BaseConfig.extend({
  PORT: BaseConfig.shape.PORT.default(3001),
  /**
   * A bulk import promotes each batch's lines, drafts and outbox rows to the old generation; with
   * V8's own growth factor the heap held 280-300 MB of them on a 1,000,000-line upload, with 100
   * about 200 (service-kit's heap.ts).
   */
  HEAP_GROWING_PERCENT: BaseConfig.shape.HEAP_GROWING_PERCENT.default(100),
  /** How long a claim holds the task before it returns to the pool (default 24 h). */
  ASSIGNMENT_LEASE_MS: z.coerce.number().int().min(1).max(30 * 24 * 3600_000).default(24 * 3600_000),
  /** Extra time after the lease before reopening: labels submitted at the last moment are in flight. */
  ASSIGNMENT_LEASE_GRACE_MS: z.coerce.number().int().min(0).max(3600_000).default(30_000),
  /** Valid lines written per transaction by a bulk import. */
  IMPORT_BATCH_SIZE: z.coerce.number().int().min(1).max(5_000).default(2_000),
  /** A longer import line is rejected unread (LINE_TOO_LONG): memory per line stays bounded. */
  IMPORT_MAX_LINE_BYTES: z.coerce.number().int().min(1_024).max(1_048_576).default(65_536),
  /** How long an upload holds its import job without a sign of life; a re-upload may take over after it. */
  IMPORT_LEASE_MS: z.coerce.number().int().min(1_000).max(3_600_000).default(30_000),
  /** Tries of one batch on transient database errors before the upload fails with 503. */
  IMPORT_BATCH_ATTEMPTS: z.coerce.number().int().min(1).max(20).default(5),
  /** SET LOCAL lock_timeout of a batch's transaction: a batch stuck behind a lock retries instead of waiting forever. */
  IMPORT_LOCK_TIMEOUT_MS: z.coerce.number().int().min(1).max(600_000).default(10_000),
  /**
   * An upload whose client sends nothing for this long is ended as interrupted (its job freed for a
   * resume), as if the connection had dropped: a client gone silent must not hold the job.
   */
  IMPORT_IDLE_MS: z.coerce.number().int().min(1_000).max(3_600_000).default(30_000),
  /**
   * How long a shutdown waits for the uploads it ends to finish their batch in flight and let go of
   * their jobs (a batch takes well under a second). Past it, a job still held is freed when its
   * lease lapses. At most 4 s: the wait runs inside the HTTP server's close, which the lifecycle
   * cuts off at 5 s (CLOSE_STEP_TIMEOUT_MS) and then closes the pool anyway.
   */
  IMPORT_CLOSE_WAIT_MS: z.coerce.number().int().min(0).max(4_000).default(3_000),
  /** Uploads one instance runs at once; more answer 429 IMPORT_BUSY with Retry-After (they share the service's database pool). */
  IMPORT_MAX_CONCURRENT: z.coerce.number().int().min(1).max(100).default(4),
  /**
   * Of those, uploads one project runs at once, and one caller across projects (at most
   * IMPORT_MAX_CONCURRENT): one tenant's uploads, however slowly they trickle in, leave the other
   * slots to the other projects, and so do the uploads of someone with roles in several.
   */
  IMPORT_MAX_PER_PROJECT: z.coerce.number().int().min(1).max(100).default(2),
});
export type TaskSvcConfig = ReturnType<typeof TaskSvcConfig.parse>;
