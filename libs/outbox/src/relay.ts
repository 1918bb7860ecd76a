import type pg from 'pg';
import { startSpan, tracingEnabled, type Logger, type Metrics, type SagaFacts, type TraceSpan } from '@labelflow/telemetry';
import { OutboxError, OutboxErrors } from './errors';
import { DEFAULT_MAX_BATCH_BYTES, type Pending } from './relay-batch';
import { drain, type DrainDeps } from './relay-drain';
import { sendApart } from './relay-parking';
import { createRowMarks, leaseSessionSql, outboxShape, readSessionSql, readSqlFor } from './relay-rows';
import type { PublishedMessage, Publisher } from './types';

export interface OutboxRelayOptions {
  readonly pool: pg.Pool;
  readonly publisher: Publisher;
  /** NOTIFY channel that `enqueue` signals; one per service. */
  readonly channel: string;
  readonly logger: Logger;
  readonly metrics?: Metrics;
  /** Most rows per send (and per read). */
  readonly batchSize?: number;
  /** Most bytes per send: value + key + header names and values + MESSAGE_OVERHEAD_BYTES per row. A row larger than this alone is sent alone. */
  readonly maxBatchBytes?: number;
  /** Poll interval when no NOTIFY arrives (lost notification, standby instance). */
  readonly pollMs?: number;
  /** How long published rows are kept before pruning. */
  readonly retentionMs?: number;
  /** Test hook, called with the rows about to be published (crash injection). */
  readonly beforePublish?: (rows: readonly PublishedMessage[]) => void;
}

export interface OutboxRelay {
  start(): void;
  close(): Promise<void>;
}

interface Wait {
  readonly wokenByNotify: boolean;
  readonly end: () => void;
}

/**
 * Publishes committed outbox rows to Kafka in id order. Only one relay per service publishes at a
 * time (a session advisory lock), so a task's events never overtake each other across instances.
 * A crash after publishing and before marking rows sent republishes them: consumers dedup.
 *
 * Within a drain, sending, reading and marking overlap: while a batch is in flight, the next one
 * is read (read-ahead of one batch) and the previous ones are marked published (relay-drain.ts).
 * A row Kafka refuses as too large is parked with every later row of its key (relay-parking.ts).
 */
export function createOutboxRelay(options: OutboxRelayOptions): OutboxRelay {
  const { pool, publisher, channel, logger, metrics, pollMs = 500, retentionMs = 7 * 24 * 3600_000 } = options;
  const batchSize = Math.max(1, Math.floor(options.batchSize ?? 500));
  const maxBatchBytes = Math.max(1, Math.floor(options.maxBatchBytes ?? DEFAULT_MAX_BATCH_BYTES));
  const lockKey = hashLockKey(`outbox:${channel}`);
  const marks = createRowMarks({ pool, logger, bundles: () => bundles, ...(metrics ? { metrics } : {}) });
  const failures = metrics?.counter('outbox_publish_failures_total', 'Failed outbox publish attempts');
  let running = false;
  let listener: pg.PoolClient | undefined;
  let leader = false;
  let pending: Wait | undefined;
  let loop: Promise<void> | undefined;
  let lastPrune = 0;
  let pruneMore = false;
  // A NOTIFY that lands while a batch is being published must not wait for the next poll.
  let dirty = false;
  let notifications = 0;
  const rowSize = { bytesPerRow: 0, messagesPerRow: 1 };
  const leading = () => leader && running;

  // Only close() and, for the leader's idle wait, a NOTIFY end a wait early: a standby cannot
  // publish what a NOTIFY announces, and a backoff cut short hammers a database that is down.
  const wait = (ms: number, { wokenByNotify }: { wokenByNotify: boolean }) =>
    new Promise<void>((resolve) => {
      if (!running) return resolve();
      const current: Wait = {
        wokenByNotify,
        end: () => {
          clearTimeout(timer);
          if (pending === current) pending = undefined;
          resolve();
        },
      };
      const timer = setTimeout(current.end, ms);
      pending = current;
    });

  function onNotification(): void {
    dirty = true;
    notifications++;
    if (pending?.wokenByNotify) pending.end();
  }

  async function connectListener(): Promise<pg.PoolClient> {
    if (listener) return listener;
    const client = await pool.connect();
    client.on('notification', onNotification);
    // The advisory lock lives and dies with this session: once it is gone, another instance may
    // lead, so this one must stop publishing before its next batch. The pool still counts a dead
    // client as checked out until it is released, so it is released here or never.
    const lost = () => {
      if (listener === client) void dropListener();
    };
    client.on('error', lost);
    client.on('end', lost);
    try {
      await client.query(`LISTEN "${channel}"`);
      // This session also runs the relay's reads, which must walk the pending rows' index in id
      // order from its start, whatever the statistics say: on a fresh table (none yet) PostgreSQL
      // would rather fetch every pending row and sort them, on every read. The session is never
      // handed back to the pool (it is destroyed on release), so the settings stay with the relay.
      // The read is a prepared statement on the services' pools (usePreparedStatements), and a
      // generic plan of it, blind to the cursor and the limit, read a third slower in bench:pipeline:
      // it is planned for its parameters every time, as an unnamed statement would be.
      await client.query(`${readSessionSql}; ${leaseSessionSql}`);
    } catch (error) {
      client.release(true);
      throw error;
    }
    listener = client;
    return client;
  }

  // Whoever unsets `listener` releases its client, so each client is released exactly once.
  async function dropListener(): Promise<void> {
    const client = listener;
    listener = undefined;
    leader = false;
    if (client) client.release(true);
  }

  async function send(rows: readonly Pending[]): Promise<void> {
    const messages = rows.map((r) => r.message);
    options.beforePublish?.(messages);
    const traced = tracingEnabled() ? messages.map(publishSpan) : undefined;
    try {
      await publisher.send(traced ? traced.map((t) => t.message) : messages);
      for (const t of traced ?? []) t.span?.end();
    } catch (error) {
      for (const t of traced ?? []) t.span?.end({ error });
      failures?.inc();
      throw new OutboxError(OutboxErrors.PUBLISH_FAILED, `publishing ${rows.length} outbox rows failed: ${(error as Error).message}`, { cause: error, retriable: true });
    }
  }

  const apart = {
    logger,
    marks,
    send,
    leading,
  };
  // The read for the outbox as the leader found it when it took the lock: an outbox migrated up to
  // the pending-rows step but not to bundles is read as plain rows.
  let bundles = true;
  let sql = readSqlFor({ bundles });
  const drainDeps = (): DrainDeps => ({
    batchSize,
    maxBatchBytes,
    sql,
    notifications: () => notifications,
    leading,
    rowSize,
    marks,
    send,
    sendApart: (rows, refusal) => sendApart(apart, rows, refusal),
  });

  // Published rows older than the retention go, oldest first, a chunk at a time: the chunk is the
  // lowest ids below the lowest pending one (every such row not parked was published), so an
  // outbox with nothing to prune costs one short walk of the primary key, not a scan. Ids follow
  // created_at closely enough (both are taken as a row is written) for the oldest rows to come
  // first; a younger row among them just waits for a later prune. One chunk per loop, between
  // drains, while a full one was pruned: a long-neglected outbox never holds publishing up for
  // more than one chunk's DELETE.
  async function prune(): Promise<void> {
    if (!pruneMore && Date.now() - lastPrune < 60_000) return;
    lastPrune = Date.now();
    const { rows } = await pool.query<{ seen: number; pruned: number }>(PRUNE_SQL, [retentionMs, PRUNE_CHUNK_ROWS]);
    const { seen = 0, pruned = 0 } = rows[0] ?? {};
    pruneMore = pruned > 0 && seen === PRUNE_CHUNK_ROWS;
  }

  async function lead(session: pg.PoolClient): Promise<boolean> {
    const got = await session.query<{ ok: boolean }>('SELECT pg_try_advisory_lock($1) AS ok', [lockKey]);
    return got.rows[0]?.ok === true;
  }

  async function step(): Promise<void> {
    const session = await connectListener();
    if (!leader) {
      leader = await lead(session);
      const shape = leader ? await outboxShape(pool) : undefined;
      if (shape) {
        bundles = shape.bundles;
        sql = readSqlFor({ bundles });
      }
      if (shape && !shape.pending) {
        // The error drops the session, and the lock with it, and the loop retries with backoff:
        // the relay starts publishing once the migration has run, without a restart.
        throw new OutboxError(
          OutboxErrors.SCHEMA_OUTDATED,
          'the outbox has no outbox_pending table: apply outboxPendingMigrationSql (service-kit core migration 106); nothing is published until then',
          { retriable: true },
        );
      }
    }
    if (!leader) return;
    dirty = false;
    if (await drain(drainDeps(), session)) dirty = true;
    if (running) await prune();
  }

  // A standby only needs to notice that the lock became free, which no NOTIFY announces.
  async function idle(): Promise<void> {
    if (!leader) return wait(pollMs, { wokenByNotify: false });
    if (dirty) return;
    return wait(pollMs, { wokenByNotify: true });
  }

  async function run(): Promise<void> {
    let backoff = 100;
    while (running) {
      try {
        await step();
        backoff = 100;
        await idle();
      } catch (error) {
        const outdated = error instanceof OutboxError && error.code === OutboxErrors.SCHEMA_OUTDATED;
        logger[outdated ? 'error' : 'warn']({ err: error, backoffMs: backoff }, 'outbox relay error; retrying');
        await dropListener();
        await wait(backoff, { wokenByNotify: false });
        backoff = Math.min(backoff * 2, 5_000);
      }
    }
  }

  return {
    start() {
      if (running) return;
      running = true;
      loop = run();
    },
    async close() {
      running = false;
      pending?.end();
      await loop;
      await dropListener();
    },
  };
}

const PRUNE_CHUNK_ROWS = 5_000;
const PRUNE_SQL = `
WITH oldest AS (
  SELECT id, created_at FROM outbox
  WHERE id < coalesce((SELECT min(id) FROM outbox_pending), 9223372036854775807) AND failed_at IS NULL
  ORDER BY id LIMIT $2
), gone AS (
  DELETE FROM outbox WHERE id IN (SELECT id FROM oldest WHERE created_at < now() - ($1::bigint * interval '1 millisecond')) RETURNING 1
)
SELECT (SELECT count(*) FROM oldest)::int AS seen, (SELECT count(*) FROM gone)::int AS pruned`;

function hashLockKey(text: string): number {
  let h = 0;
  for (let i = 0; i < text.length; i++) h = (Math.imul(h, 31) + text.charCodeAt(i)) | 0;
  return h;
}

/**
 * A span per published row, a child of the trace its row stored (the request's or the consumed
 * event's), and the message sent on with this span's context: its consumer's span then hangs under
 * the publish. The row itself keeps the headers it was written with.
 */
function publishSpan(message: PublishedMessage): { readonly message: PublishedMessage; readonly span: TraceSpan | undefined } {
  const facts = factsOf(message);
  const span = startSpan(`publish ${facts.eventType ?? message.topic}`, {
    kind: 'producer',
    headers: message.headers,
    facts,
    attributes: { 'messaging.system': 'kafka', 'messaging.operation.type': 'send', 'messaging.destination.name': message.topic, 'messaging.kafka.message.key': message.key },
  });
  return { message: span ? { ...message, headers: { ...message.headers, ...span.headers() } } : message, span };
}

/** The saga facts of an event row; read only while tracing records. */
function factsOf(message: PublishedMessage): SagaFacts {
  const eventType = message.headers['event-type'];
  try {
    const event = JSON.parse(message.value) as { taskId?: unknown; projectId?: unknown; attempt?: unknown; type?: unknown };
    return {
      taskId: typeof event.taskId === 'string' ? event.taskId : message.key,
      ...(typeof event.projectId === 'string' ? { projectId: event.projectId } : {}),
      ...(typeof event.attempt === 'number' ? { attempt: event.attempt } : {}),
      ...(typeof event.type === 'string' ? { eventType: event.type } : eventType ? { eventType } : {}),
    };
  } catch {
    return { taskId: message.key, ...(eventType ? { eventType } : {}) };
  }
}
