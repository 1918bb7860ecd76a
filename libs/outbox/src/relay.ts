import type pg from 'pg';
import type { Logger, Metrics } from '@labelflow/telemetry';
import { OutboxError, OutboxErrors } from './errors';
import type { PublishedMessage, Publisher } from './types';

/** Under Kafka's default max.message.bytes (1 MB) with room for the record batch framing. */
export const DEFAULT_MAX_BATCH_BYTES = 768 * 1024;
/** Counted per message on top of value, key and headers: Kafka's record framing, generously. */
export const MESSAGE_OVERHEAD_BYTES = 64;
/** A drain that is caught up but keeps hearing NOTIFYs reads on for at most this long. */
const MAX_DRAIN_MS_ON_NOTIFY = 1_000;

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

interface ReadRow {
  id: string;
  topic: string;
  message_key: string;
  payload: unknown;
  headers: Record<string, string>;
  /** An earlier row of the same key is parked (failed_at set): this one must not overtake it. */
  held: boolean;
  /** Pending rows found after the cursor, before the byte cut. */
  fetched: number;
  /** Pending rows at or below the read's cursor, in the read's snapshot. */
  behind: number;
}

/** A row read and not yet published, with its Kafka message and its counted size. */
interface Pending {
  readonly id: string;
  readonly message: PublishedMessage;
  readonly bytes: number;
  readonly held: boolean;
}

const FailReason = { tooLarge: 'too_large', held: 'held' } as const;
type FailReason = (typeof FailReason)[keyof typeof FailReason];

/**
 * Publishes committed outbox rows to Kafka in id order. Only one relay per service publishes at a
 * time (a session advisory lock), so a task's events never overtake each other across instances.
 * A crash after publishing and before marking rows sent republishes them: consumers dedup.
 *
 * Within a drain, sending, reading and marking overlap: while a batch is in flight, the next one
 * is read (read-ahead of one batch) and the previous ones are marked published (see drain()).
 */
export function createOutboxRelay(options: OutboxRelayOptions): OutboxRelay {
  const { pool, publisher, channel, logger, metrics, pollMs = 500, retentionMs = 7 * 24 * 3600_000 } = options;
  const batchSize = Math.max(1, Math.floor(options.batchSize ?? 500));
  const maxBatchBytes = Math.max(1, Math.floor(options.maxBatchBytes ?? DEFAULT_MAX_BATCH_BYTES));
  const lockKey = hashLockKey(`outbox:${channel}`);
  const published = metrics?.counter('outbox_published_total', 'Outbox rows published to Kafka');
  const failures = metrics?.counter('outbox_publish_failures_total', 'Failed outbox publish attempts');
  const parked = metrics?.counter('outbox_failed_total', 'Outbox rows given up on (failed_at set): too_large for their topic, or held behind such a row of the same key', ['reason']);
  let running = false;
  let listener: pg.PoolClient | undefined;
  let leader = false;
  /** Whether the table has the failed_at column (outboxFailedRowsMigrationSql); checked on taking the lead. */
  let parkable = false;
  let pending: Wait | undefined;
  let loop: Promise<void> | undefined;
  let lastPrune = 0;
  // A NOTIFY that lands while a batch is being published must not wait for the next poll.
  let dirty = false;
  let notifications = 0;
  /** Average counted bytes per row of the last read: bounds the next read's LIMIT for very large rows. */
  let bytesPerRow = 0;

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
      await client.query('SET enable_seqscan = off; SET enable_bitmapscan = off');
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

  const open = (t = '') => (parkable ? `${t}published_at IS NULL AND ${t}failed_at IS NULL` : `${t}published_at IS NULL`);

  /**
   * One statement, one snapshot. `head` walks the pending rows from the lowest id, as a relay that
   * re-reads from the start would, but narrowly (ids and sizes only), skipping the rows whose mark
   * is under way ($4), and at most `outstanding + limit` of them: the rows at or below the cursor
   * are this drain's own outstanding rows plus any row that committed after the cursor passed it
   * (`behind` counts both). The rows after the cursor are cut once those before one already hold
   * `maxBatchBytes` (jsonb's stored size for small payloads, the JSON text's size for large ones,
   * which are stored compressed), and only the rows kept are fetched whole. Each says whether an
   * earlier row of its key is parked.
   * $1 cursor, $2 maxBatchBytes, $3 outstanding + limit, $4 ids being marked.
   */
  const readSql = () => `
WITH head AS MATERIALIZED (
  SELECT id, CASE WHEN id <= $1 THEN 0
                  WHEN pg_column_size(payload) > 2000 THEN octet_length(payload::text)
                  ELSE pg_column_size(payload) END AS size
  FROM outbox WHERE ${open()} AND NOT (id = ANY($4::bigint[])) ORDER BY id LIMIT $3
), fresh AS MATERIALIZED (
  SELECT id, sum(size) OVER (ORDER BY id) - size AS bytes_before FROM head WHERE id > $1
), cut AS MATERIALIZED (
  SELECT (SELECT count(*) FROM head WHERE id <= $1)::int AS behind,
         (SELECT count(*) FROM fresh)::int AS fetched,
         (SELECT max(id) FROM fresh WHERE bytes_before < $2) AS last,
         ${parkable ? 'EXISTS (SELECT 1 FROM outbox WHERE failed_at IS NOT NULL)' : 'false'} AS any_parked
)
SELECT o.id, o.topic, o.message_key, o.payload, o.headers,
       ${parkable ? '(SELECT any_parked FROM cut) AND EXISTS (SELECT 1 FROM outbox f WHERE f.failed_at IS NOT NULL AND f.message_key = o.message_key AND f.id < o.id)' : 'false'} AS held,
       (SELECT fetched FROM cut) AS fetched, (SELECT behind FROM cut) AS behind
FROM outbox o
WHERE o.id > $1 AND o.id <= (SELECT last FROM cut) AND ${open('o.')}
ORDER BY o.id`;

  async function markPublished(rows: readonly Pending[]): Promise<void> {
    await pool.query('UPDATE outbox SET published_at = now() WHERE id = ANY($1::bigint[])', [rows.map((r) => r.id)]);
    published?.inc(rows.length);
  }

  async function park(rows: readonly Pending[], reason: FailReason, failure: string): Promise<void> {
    await pool.query('UPDATE outbox SET failed_at = now(), failure = $2 WHERE id = ANY($1::bigint[])', [rows.map((r) => r.id), failure.slice(0, 2000)]);
    parked?.inc({ reason }, rows.length);
  }

  async function parkHeld(rows: readonly Pending[]): Promise<void> {
    await park(rows, FailReason.held, 'held: an earlier row of the same message_key is parked (failed_at set)');
    logger.error(
      { outboxIds: rows.map((r) => r.id), keys: [...new Set(rows.map((r) => r.message.key))] },
      'outbox rows held behind a parked row of the same key; not published (failed_at set)',
    );
  }

  async function send(rows: readonly Pending[]): Promise<void> {
    const messages = rows.map((r) => r.message);
    options.beforePublish?.(messages);
    try {
      await publisher.send(messages);
    } catch (error) {
      failures?.inc();
      throw new OutboxError(OutboxErrors.PUBLISH_FAILED, `publishing ${rows.length} outbox rows failed: ${(error as Error).message}`, { cause: error, retriable: true });
    }
  }

  /**
   * Publishes whatever is pending, in id order, until caught up, closed or no longer leading.
   * Returns true if rows may be left that the next drain must pick up at once.
   *
   * Three lanes, each one thing at a time: the Kafka lane (this loop) sends batch after batch; the
   * read lane (on the LISTEN session) reads the next batch while the current one is sent; the mark
   * lane (a pool connection) marks what was sent, every batch sent since its last UPDATE in one,
   * while the next batch is sent and read.
   */
  async function drain(session: pg.PoolClient): Promise<boolean> {
    const reads = createLane();
    const marks = createLane();
    const failed = () => reads.failed || marks.failed;
    const sql = readSql();
    const startedAt = Date.now();
    // Rows read and not yet sent, in id order.
    const window: Pending[] = [];
    let cursor = '0';
    // Rows read in this drain that are not known to be marked (or parked) yet.
    let outstanding = 0;
    // Of those, the ones whose UPDATE is queued or running: a read skips them, committed or not.
    const resolving = new Set<string>();
    const toMark: Pending[] = [];
    let markQueued = false;
    let exhausted = false;
    let again = false;
    let reading: Promise<void> | undefined;

    const read = async () => {
      const limit = bytesPerRow > 0 ? Math.max(1, Math.min(batchSize, Math.ceil((2 * maxBatchBytes) / bytesPerRow))) : batchSize;
      const seen = notifications;
      // Taken together, in one synchronous step: a mark that commits later is skipped by id.
      const skipping = [...resolving];
      const expected = outstanding - skipping.length;
      const { rows } = await session.query<ReadRow>(sql, [cursor, maxBatchBytes, expected + limit, skipping]);
      const first = rows[0];
      if (!first) {
        exhausted = true;
        return;
      }
      if (first.behind > expected) {
        // A row below the cursor committed after the cursor passed it (ids are taken at INSERT,
        // rows become visible at COMMIT). Sending this read could let a later event of its key
        // overtake it: drop the read, finish what is in flight and start again from the lowest id.
        exhausted = true;
        again = true;
        return;
      }
      let bytes = 0;
      for (const r of rows) {
        const message: PublishedMessage = { topic: r.topic, key: r.message_key, value: JSON.stringify(r.payload), headers: r.headers };
        const size = sizeOf(message);
        bytes += size;
        window.push({ id: r.id, message, bytes: size, held: r.held });
      }
      bytesPerRow = bytes / rows.length;
      outstanding += rows.length;
      cursor = rows[rows.length - 1]?.id ?? cursor;
      // Caught up: fewer rows than asked for and none left behind by the byte cut. A NOTIFY since
      // the read began means more may have committed: read on rather than restart the pipeline,
      // but only for a while, so that a steady trickle still lets prune() and a fresh start run.
      const caughtUp = first.fetched < limit && rows.length === first.fetched;
      if (caughtUp && (notifications === seen || Date.now() - startedAt > MAX_DRAIN_MS_ON_NOTIFY)) exhausted = true;
    };
    const readMore = () => {
      const p: Promise<void> = reads.run(read).then(() => {
        if (reading === p) reading = undefined;
      });
      reading = p;
    };
    const resolve = (rows: readonly Pending[], update: (rows: readonly Pending[]) => Promise<void>) => {
      for (const r of rows) resolving.add(r.id);
      void marks.run(async () => {
        await update(rows);
        outstanding -= rows.length;
        for (const r of rows) resolving.delete(r.id);
      });
    };
    const markSent = (rows: readonly Pending[]) => {
      for (const r of rows) resolving.add(r.id);
      toMark.push(...rows);
      if (markQueued) return;
      markQueued = true;
      void marks.run(async () => {
        markQueued = false;
        const batch = toMark.splice(0);
        await markPublished(batch);
        outstanding -= batch.length;
        for (const r of batch) resolving.delete(r.id);
      });
    };

    try {
      for (;;) {
        if (window.length === 0 && !reading && !exhausted && !failed()) readMore();
        if (window.length === 0) {
          if (!reading) break;
          await reading;
          continue;
        }
        // Stopping between batches keeps close() within the service's shutdown budget, and a
        // relay whose LISTEN session (and so its lock) is gone must not send another batch.
        if (!leader || !running || failed()) break;
        const { batch, held } = take(window, batchSize, maxBatchBytes);
        // Read-ahead: the next batch is read while this one is sent.
        if (!reading && !exhausted && window.length < batchSize) readMore();
        if (held.length > 0) resolve(held, parkHeld);
        if (batch.length === 0) continue;
        try {
          await send(batch);
        } catch (error) {
          if (!isTooLarge(error)) throw error;
          // Rare: the topic refused the batch as too large. Stop the pipeline, send this batch
          // again in halves down to single rows, and start the next drain from the lowest id.
          await Promise.all([reads.idle(), marks.idle()]);
          window.length = 0;
          again = true;
          if (!failed()) await sendApart(batch, error);
          break;
        }
        markSent(batch);
      }
    } finally {
      // Marks of batches already sent land before this drain ends, whatever happens: the next
      // drain reads from the lowest pending id and must not see them again.
      await Promise.all([reads.idle(), marks.idle()]);
    }
    if (marks.failed) throw marks.error;
    if (reads.failed) throw reads.error;
    return again;
  }

  /**
   * Sends `rows` (which the broker refused together as too large) in halves, recursively and in id
   * order, marking each part as it goes. A row refused on its own is parked, and so is every later
   * row of its key, so that the key's events never overtake it.
   */
  async function sendApart(rows: readonly Pending[], refusal: unknown): Promise<void> {
    const parkedKeys = new Set<string>();
    const visit = async (part: readonly Pending[], knownTooLarge: unknown): Promise<void> => {
      if (!leader || !running) return;
      const held = part.filter((r) => parkedKeys.has(r.message.key));
      const live = part.filter((r) => !parkedKeys.has(r.message.key));
      if (held.length > 0) await parkHeld(held);
      if (live.length === 0) return;
      // The first call is for a batch the broker has just refused whole: no need to ask again.
      let refused = held.length === 0 ? knownTooLarge : undefined;
      if (!refused) {
        try {
          await send(live);
          await markPublished(live);
          return;
        } catch (error) {
          if (!isTooLarge(error)) throw error;
          refused = error;
        }
      }
      if (live.length > 1) {
        const mid = Math.ceil(live.length / 2);
        await visit(live.slice(0, mid), undefined);
        await visit(live.slice(mid), undefined);
        return;
      }
      const [row] = live;
      if (!row) return;
      const detail = { outboxId: row.id, topic: row.message.topic, key: row.message.key, bytes: row.bytes, err: refused };
      if (!parkable) parkable = await hasFailedColumn();
      if (!parkable) {
        logger.error(detail, 'outbox row too large for its topic, and the outbox table has no failed_at column to park it (apply outboxFailedRowsMigrationSql): the relay retries it and everything behind it waits');
        throw refused;
      }
      await park(live, FailReason.tooLarge, `too large for topic ${row.message.topic} (${row.bytes} bytes counted): ${(refused as Error).message}`);
      parkedKeys.add(row.message.key);
      logger.error(detail, 'outbox row too large for its topic; parked (failed_at set), later rows of its key are held behind it');
    };
    await visit(rows, refusal);
  }

  async function prune(): Promise<void> {
    if (Date.now() - lastPrune < 60_000) return;
    lastPrune = Date.now();
    await pool.query(`DELETE FROM outbox WHERE published_at < now() - ($1::bigint * interval '1 millisecond')`, [retentionMs]);
  }

  async function lead(session: pg.PoolClient): Promise<boolean> {
    const got = await session.query<{ ok: boolean }>('SELECT pg_try_advisory_lock($1) AS ok', [lockKey]);
    return got.rows[0]?.ok === true;
  }

  async function hasFailedColumn(): Promise<boolean> {
    const { rows } = await pool.query<{ ok: boolean }>(
      `SELECT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass('outbox') AND attname = 'failed_at' AND NOT attisdropped) AS ok`,
    );
    return rows[0]?.ok === true;
  }

  async function step(): Promise<void> {
    const session = await connectListener();
    if (!leader) {
      leader = await lead(session);
      if (leader) parkable = await hasFailedColumn();
    }
    if (!leader) return;
    dirty = false;
    if (await drain(session)) dirty = true;
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
        logger.warn({ err: error, backoffMs: backoff }, 'outbox relay error; retrying');
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

/** The next batch off the front of `window`: at most `maxRows` rows and `maxBytes` bytes (at least one row), and the held rows met on the way. */
function take(window: Pending[], maxRows: number, maxBytes: number): { batch: Pending[]; held: Pending[] } {
  const batch: Pending[] = [];
  const held: Pending[] = [];
  let bytes = 0;
  let i = 0;
  for (; i < window.length && batch.length < maxRows; i++) {
    const row = window[i];
    if (!row) break;
    if (row.held) {
      held.push(row);
      continue;
    }
    if (batch.length > 0 && bytes + row.bytes > maxBytes) break;
    batch.push(row);
    bytes += row.bytes;
  }
  window.splice(0, i);
  return { batch, held };
}

/** What a message counts against `maxBatchBytes`: UTF-8 bytes of value, key, header names and values, plus framing. */
export function sizeOf(message: PublishedMessage): number {
  let n = Buffer.byteLength(message.value) + Buffer.byteLength(message.key) + MESSAGE_OVERHEAD_BYTES;
  for (const name in message.headers) n += Buffer.byteLength(name) + Buffer.byteLength(message.headers[name] ?? '');
  return n;
}

/** The broker's MESSAGE_TOO_LARGE / RECORD_LIST_TOO_LARGE, as kafkajs reports it directly or wrapped (and as the relay wraps it). */
export function isTooLarge(error: unknown): boolean {
  for (let e = error as { type?: unknown; cause?: unknown; originalError?: unknown } | undefined, depth = 0; e && depth < 6; depth++) {
    if (e.type === 'MESSAGE_TOO_LARGE' || e.type === 'RECORD_LIST_TOO_LARGE') return true;
    e = (e.originalError ?? e.cause) as typeof e;
  }
  return false;
}

/** Database work of one drain, one statement at a time and in order, so a read never races a mark. The first failure skips the rest. */
function createLane() {
  let tail: Promise<void> = Promise.resolve();
  const lane = {
    failed: false,
    error: undefined as unknown,
    run(op: () => Promise<void>): Promise<void> {
      tail = tail.then(async () => {
        if (lane.failed) return;
        try {
          await op();
        } catch (error) {
          lane.failed = true;
          lane.error = error;
        }
      });
      return tail;
    },
    idle: () => tail,
  };
  return lane;
}

function hashLockKey(text: string): number {
  let h = 0;
  for (let i = 0; i < text.length; i++) h = (Math.imul(h, 31) + text.charCodeAt(i)) | 0;
  return h;
}
