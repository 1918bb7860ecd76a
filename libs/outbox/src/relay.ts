import type pg from 'pg';
import type { Logger, Metrics } from '@labelflow/telemetry';
import { OutboxError, OutboxErrors } from './errors';
import type { PublishedMessage, Publisher } from './types';

export interface OutboxRelayOptions {
  readonly pool: pg.Pool;
  readonly publisher: Publisher;
  /** NOTIFY channel that `enqueue` signals; one per service. */
  readonly channel: string;
  readonly logger: Logger;
  readonly metrics?: Metrics;
  readonly batchSize?: number;
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

interface Row {
  id: string;
  topic: string;
  message_key: string;
  payload: unknown;
  headers: Record<string, string>;
}

/**
 * Publishes committed outbox rows to Kafka in id order. Only one relay per service publishes at a
 * time (a session advisory lock), so a task's events never overtake each other across instances.
 * A crash after publishing and before marking rows sent republishes them: consumers dedup.
 */
export function createOutboxRelay(options: OutboxRelayOptions): OutboxRelay {
  const { pool, publisher, channel, logger, metrics, batchSize = 500, pollMs = 500, retentionMs = 7 * 24 * 3600_000 } = options;
  const lockKey = hashLockKey(`outbox:${channel}`);
  const published = metrics?.counter('outbox_published_total', 'Outbox rows published to Kafka');
  const failures = metrics?.counter('outbox_publish_failures_total', 'Failed outbox publish attempts');
  let running = false;
  let listener: pg.PoolClient | undefined;
  let leader = false;
  let wake: (() => void) | undefined;
  let loop: Promise<void> | undefined;
  let lastPrune = 0;
  // A NOTIFY that lands while a batch is being published must not wait for the next poll.
  let dirty = false;

  const sleep = (ms: number) =>
    new Promise<void>((resolve) => {
      if (dirty) return resolve();
      const timer = setTimeout(() => {
        wake = undefined;
        resolve();
      }, ms);
      wake = () => {
        clearTimeout(timer);
        wake = undefined;
        resolve();
      };
    });

  async function connectListener(): Promise<pg.PoolClient> {
    if (listener) return listener;
    const client = await pool.connect();
    client.on('notification', () => {
      dirty = true;
      wake?.();
    });
    // The advisory lock lives and dies with this session: once it is gone, another instance may
    // lead, so this one must stop publishing before its next batch.
    const lost = () => {
      if (listener === client) {
        listener = undefined;
        leader = false;
      }
    };
    client.on('error', lost);
    client.on('end', lost);
    try {
      await client.query(`LISTEN "${channel}"`);
    } catch (error) {
      client.release(true);
      throw error;
    }
    listener = client;
    return client;
  }

  async function dropListener(): Promise<void> {
    const client = listener;
    listener = undefined;
    leader = false;
    if (client) client.release(true);
  }

  async function publishBatch(): Promise<number> {
    const { rows } = await pool.query<Row>(
      'SELECT id, topic, message_key, payload, headers FROM outbox WHERE published_at IS NULL ORDER BY id LIMIT $1',
      [batchSize],
    );
    if (rows.length === 0) return 0;
    const messages: PublishedMessage[] = rows.map((r) => ({ topic: r.topic, key: r.message_key, value: JSON.stringify(r.payload), headers: r.headers }));
    options.beforePublish?.(messages);
    try {
      await publisher.send(messages);
    } catch (error) {
      failures?.inc();
      throw new OutboxError(OutboxErrors.PUBLISH_FAILED, `publishing ${rows.length} outbox rows failed: ${(error as Error).message}`, { cause: error, retriable: true });
    }
    await pool.query('UPDATE outbox SET published_at = now() WHERE id = ANY($1::bigint[])', [rows.map((r) => r.id)]);
    published?.inc(rows.length);
    return rows.length;
  }

  async function drainOnce(): Promise<number> {
    let total = 0;
    for (;;) {
      if (!leader) return total;
      const n = await publishBatch();
      total += n;
      if (n < batchSize) return total;
    }
  }

  async function prune(): Promise<void> {
    if (Date.now() - lastPrune < 60_000) return;
    lastPrune = Date.now();
    await pool.query(`DELETE FROM outbox WHERE published_at < now() - ($1::bigint * interval '1 millisecond')`, [retentionMs]);
  }

  async function run(): Promise<void> {
    let backoff = 100;
    while (running) {
      try {
        const session = await connectListener();
        if (!leader) {
          const got = await session.query<{ ok: boolean }>('SELECT pg_try_advisory_lock($1) AS ok', [lockKey]);
          leader = got.rows[0]?.ok === true;
        }
        if (leader) {
          dirty = false;
          await drainOnce();
          await prune();
        }
        backoff = 100;
        if (running) await sleep(pollMs);
      } catch (error) {
        logger.warn({ err: error, backoffMs: backoff }, 'outbox relay error; retrying');
        await dropListener();
        if (running) await sleep(backoff);
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
      wake?.();
      await loop;
      await dropListener();
    },
  };
}

function hashLockKey(text: string): number {
  let h = 0;
  for (let i = 0; i < text.length; i++) h = (Math.imul(h, 31) + text.charCodeAt(i)) | 0;
  return h;
}
