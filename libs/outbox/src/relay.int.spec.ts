import { afterAll, afterEach, beforeAll, describe, expect, inject, it } from 'vitest';
import pg from 'pg';
import { createKafka, createPublisher, ensureTopics, type KafkaPublisher } from '@labelflow/messaging';
import { createLogger } from '@labelflow/telemetry';
import { captureLogs, createTestDatabase, eventually, readAll, readTopic, uniqueName, createTestPool } from '@labelflow/testing';
import { createOutboxRelay, enqueue, outboxMigrationSql, type OutboxRelay, type PublishedMessage, type Publisher } from './index';

const infra = inject('infra');
const logger = createLogger({ service: 'outbox-test', level: 'silent' });

/** Records when each advisory-lock attempt of a pool's clients is sent to PostgreSQL. */
function lockAttempts() {
  const at: number[] = [];
  class CountingClient extends pg.Client {
    override query(...args: unknown[]): never {
      const text = typeof args[0] === 'string' ? args[0] : (args[0] as { text?: unknown } | undefined)?.text;
      if (typeof text === 'string' && text.includes('pg_try_advisory_lock')) at.push(Date.now());
      return (super.query as (...a: unknown[]) => never)(...args);
    }
  }
  return { at, Client: CountingClient };
}

/** A logger that keeps the relay's retry warnings: when each was logged and the backoff it announced. */
function retryLog() {
  const { logger, lines } = captureLogs({ service: 'outbox-test', level: 'warn' });
  return {
    logger,
    get retries() {
      return lines.filter((l) => typeof l.backoffMs === 'number').map((l) => ({ at: Date.parse(l.time), backoffMs: l.backoffMs as number }));
    },
  };
}

const lockHolderSql = `SELECT l.pid FROM pg_locks l JOIN pg_database d ON d.oid = l.database WHERE l.locktype = 'advisory' AND l.granted AND d.datname = current_database()`;
const lockHolder = async (db: pg.Pool | pg.Client): Promise<number | null> => (await db.query<{ pid: number }>(lockHolderSql)).rows[0]?.pid ?? null;
const seqOf = (value: Buffer | null) => (JSON.parse(value!.toString()) as { seq: number }).seq;
const upTo = (n: number) => Array.from({ length: n }, (_, i) => i);

describe('the outbox relay', () => {
  let pool: pg.Pool;
  let drop: () => Promise<void>;
  let publisher: KafkaPublisher;
  const relays: OutboxRelay[] = [];
  // Undone last-first after the relays stop: pools end before their database is dropped.
  const cleanups: (() => Promise<void>)[] = [];
  const kafka = createKafka({ brokers: infra.kafkaBrokers.split(','), clientId: 'outbox-test', logger });

  beforeAll(async () => {
    const db = await createTestDatabase(infra.pgUrl, uniqueName('outbox'));
    drop = db.drop;
    pool = createTestPool(db.url);
    await pool.query(outboxMigrationSql);
    publisher = createPublisher(kafka);
    await publisher.connect();
  });
  afterEach(async () => {
    await Promise.all(relays.splice(0).map((r) => r.close()));
    for (const undo of cleanups.splice(0).reverse()) await undo();
    await pool.query('TRUNCATE outbox');
  });
  afterAll(async () => {
    await publisher.disconnect();
    await pool.end();
    await drop();
  });

  const freshTopic = async () => {
    const topic = uniqueName('outbox-topic');
    await ensureTopics(kafka, [topic], 3);
    return topic;
  };
  /** A pool on `url` whose sessions a test may kill: the pool reports that as 'error', on purpose here. */
  const poolFor = (url: string, { max = 10, Client }: { max?: number; Client?: typeof pg.Client } = {}) => {
    const own = new pg.Pool({ connectionString: url, max, ...(Client ? { Client } : {}) });
    own.on('error', () => undefined);
    cleanups.push(() => own.end());
    return own;
  };
  /** A database of its own, for tests that kill its sessions, refuse its connections or size its pool. */
  const freshDatabase = async ({ max }: { max?: number } = {}) => {
    const name = uniqueName('outbox');
    const db = await createTestDatabase(infra.pgUrl, name);
    cleanups.push(db.drop);
    const own = poolFor(db.url, { max });
    await own.query(outboxMigrationSql);
    return { name, url: db.url, pool: own };
  };
  const rows = (topic: string, key: string, n: number, from = 0) =>
    Array.from({ length: n }, (_, i) => ({ topic, key, eventId: crypto.randomUUID(), eventType: 'Test', payload: { key, seq: from + i } }));
  const start = (over: Partial<Parameters<typeof createOutboxRelay>[0]> = {}) => {
    const relay = createOutboxRelay({ pool, publisher, channel: 'outbox_test', logger, pollMs: 5_000, ...over });
    relays.push(relay);
    relay.start();
    return relay;
  };

  it('publishes committed rows in order per key, woken by NOTIFY rather than the poll', async () => {
    const topic = await freshTopic();
    start();
    for (let batch = 0; batch < 5; batch++) {
      const client = await pool.connect();
      await client.query('BEGIN');
      await enqueue(client, 'outbox_test', [...rows(topic, 'task-a', 4, batch * 4), ...rows(topic, 'task-b', 4, batch * 4)]);
      await client.query('COMMIT');
      client.release();
    }
    const started = Date.now();
    const read = await readTopic(infra.kafkaBrokers, topic, (m) => m.length >= 40);
    // Poll is 5 s: arriving well before it proves the NOTIFY path.
    expect(Date.now() - started).toBeLessThan(4_000);
    for (const key of ['task-a', 'task-b']) {
      const seqs = read.filter((m) => m.key?.toString() === key).map((m) => (JSON.parse(m.value!.toString()) as { seq: number }).seq);
      expect(seqs).toEqual(Array.from({ length: 20 }, (_, i) => i));
    }
    await eventually(async () => expect((await pool.query('SELECT count(*)::int AS n FROM outbox WHERE published_at IS NULL')).rows[0].n).toBe(0));
  });

  it('never publishes rows of a transaction that rolled back', async () => {
    const topic = await freshTopic();
    start();
    const client = await pool.connect();
    await client.query('BEGIN');
    await enqueue(client, 'outbox_test', rows(topic, 'ghost', 3));
    await client.query('ROLLBACK');
    await client.query('BEGIN');
    await enqueue(client, 'outbox_test', rows(topic, 'real', 1));
    await client.query('COMMIT');
    client.release();
    const read = await readTopic(infra.kafkaBrokers, topic, (m) => m.some((x) => x.key?.toString() === 'real'));
    expect(read.map((m) => m.key?.toString())).toEqual(['real']);
  });

  it('lets only one of two relays publish, so order per key holds across instances', async () => {
    const topic = await freshTopic();
    const sentBy: string[] = [];
    const tagging = (name: string): Publisher => ({
      send: async (messages: readonly PublishedMessage[]) => {
        sentBy.push(...messages.map(() => name));
        await publisher.send(messages);
      },
    });
    start({ publisher: tagging('first'), pollMs: 100 });
    await eventually(async () => expect((await pool.query(`SELECT count(*)::int AS n FROM pg_locks l JOIN pg_database d ON d.oid = l.database WHERE l.locktype = 'advisory' AND d.datname = current_database()`)).rows[0].n).toBeGreaterThan(0));
    start({ publisher: tagging('second'), pollMs: 100 });
    await enqueue(pool, 'outbox_test', rows(topic, 'k', 30));
    const read = await readTopic(infra.kafkaBrokers, topic, (m) => m.length >= 30);
    expect(new Set(sentBy)).toEqual(new Set(['first']));
    expect(read.map((m) => (JSON.parse(m.value!.toString()) as { seq: number }).seq)).toEqual(Array.from({ length: 30 }, (_, i) => i));
  });

  it('republishes rows whose publish was not confirmed, so nothing is lost (at least once)', async () => {
    const topic = await freshTopic();
    let failNext = true;
    const flaky: Publisher = {
      send: async (messages) => {
        await publisher.send(messages);
        // Sent, then "crash" before the rows are marked: the relay must send them again.
        if (failNext) {
          failNext = false;
          throw new Error('connection lost after send');
        }
      },
    };
    start({ publisher: flaky, pollMs: 100 });
    await enqueue(pool, 'outbox_test', rows(topic, 'k', 2));
    const read = await readTopic(infra.kafkaBrokers, topic, (m) => m.length >= 4);
    expect(read.map((m) => (JSON.parse(m.value!.toString()) as { seq: number }).seq)).toEqual([0, 1, 0, 1]);
    await eventually(async () => expect((await pool.query('SELECT count(*)::int AS n FROM outbox WHERE published_at IS NULL')).rows[0].n).toBe(0));
  });

  it('keeps a standby to one lock attempt per poll interval however many NOTIFYs arrive', async () => {
    const pollMs = 200;
    const db = await freshDatabase();
    start({ pool: db.pool, pollMs });
    await eventually(async () => expect(await lockHolder(db.pool)).not.toBeNull());
    const attempts = lockAttempts();
    start({ pool: poolFor(db.url, { Client: attempts.Client }), pollMs });
    await eventually(() => expect(attempts.at.length).toBeGreaterThan(0));
    for (let round = 0; round < 3; round++) {
      const before = attempts.at.length;
      await db.pool.query("SELECT pg_notify('outbox_test', '')");
      await eventually(() => expect(attempts.at.length).toBeGreaterThan(before), { intervalMs: 10 });
    }
    const gaps = attempts.at.slice(1).map((t, i) => t - attempts.at[i]!);
    // Timers may fire a millisecond early against Date.now(); a spinning standby shows gaps near 0.
    expect(Math.min(...gaps)).toBeGreaterThanOrEqual(pollMs - 10);
  });

  it('backs off between retries while the database refuses connections, even after a NOTIFY', async () => {
    const db = await freshDatabase();
    start({ pool: db.pool });
    await eventually(async () => expect(await lockHolder(db.pool)).not.toBeNull());
    const attempts = lockAttempts();
    const standby = retryLog();
    start({ pool: poolFor(db.url, { Client: attempts.Client }), logger: standby.logger, pollMs: 100 });
    await eventually(() => expect(attempts.at.length).toBeGreaterThan(0));
    // The standby hears this NOTIFY and, not leading, can never act on it.
    await db.pool.query("SELECT pg_notify('outbox_test', '')");
    const admin = new pg.Client({ connectionString: `${infra.pgUrl}/postgres` });
    await admin.connect();
    cleanups.push(async () => {
      await admin.query(`ALTER DATABASE "${db.name}" ALLOW_CONNECTIONS true`);
      await admin.end();
    });
    await admin.query(`ALTER DATABASE "${db.name}" ALLOW_CONNECTIONS false`);
    await admin.query('SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1', [db.name]);
    await eventually(() => expect(standby.retries.length).toBeGreaterThanOrEqual(4));
    expect(standby.retries.slice(0, 4).map((r) => r.backoffMs)).toEqual([100, 200, 400, 800]);
    for (let i = 1; i < 4; i++) {
      const previous = standby.retries[i - 1]!;
      expect(standby.retries[i]!.at - previous.at).toBeGreaterThanOrEqual(previous.backoffMs - 10);
    }
  });

  it('releases the LISTEN connection each time its session is killed, so the pool never runs dry', async () => {
    const max = 3;
    const db = await freshDatabase({ max });
    const topic = await freshTopic();
    // Watches from outside the relay's pool, which a leak would leave with no client to lend.
    const observer = new pg.Client({ connectionString: db.url });
    await observer.connect();
    cleanups.push(() => observer.end());
    start({ pool: db.pool, pollMs: 100 });
    const nextHolder = (previous: number | null) =>
      eventually(
        async () => {
          const pid = await lockHolder(observer);
          expect(pid).not.toBeNull();
          expect(pid).not.toBe(previous);
          return pid!;
        },
        { timeoutMs: 10_000 },
      );
    let holder = await nextHolder(null);
    for (let kill = 0; kill < max + 2; kill++) {
      await observer.query('SELECT pg_terminate_backend($1)', [holder]);
      holder = await nextHolder(holder);
    }
    await enqueue(db.pool, 'outbox_test', rows(topic, 'k', 3));
    const read = await readTopic(infra.kafkaBrokers, topic, (m) => m.length >= 3);
    expect(read.map((m) => seqOf(m.value))).toEqual(upTo(3));
    // At rest the relay holds exactly one client: its LISTEN session.
    await eventually(() => expect(db.pool.totalCount - db.pool.idleCount).toBe(1));
  });

  it('stops between batches on close, leaving unpublished rows pending for the next leader', async () => {
    const batchSize = 10;
    const db = await freshDatabase();
    const topic = await freshTopic();
    let sends = 0;
    let sending!: () => void;
    const firstSend = new Promise<void>((resolve) => (sending = resolve));
    let release!: () => void;
    const released = new Promise<void>((resolve) => (release = resolve));
    const held: Publisher = {
      send: async (messages) => {
        sends++;
        sending();
        await released;
        await publisher.send(messages);
      },
    };
    const relay = start({ pool: db.pool, publisher: held, batchSize });
    await enqueue(db.pool, 'outbox_test', rows(topic, 'k', 50));
    await firstSend;
    const closed = relay.close();
    // The batch in flight when close() is called still completes, so it is marked sent.
    release();
    await closed;
    expect(sends).toBe(1);
    const marked = await db.pool.query<{ seq: number; sent: boolean }>(`SELECT (payload->>'seq')::int AS seq, published_at IS NOT NULL AS sent FROM outbox ORDER BY id`);
    expect(marked.rows.filter((r) => r.sent).map((r) => r.seq)).toEqual(upTo(batchSize));
    expect(marked.rows.filter((r) => !r.sent)).toHaveLength(50 - batchSize);
    expect((await readAll(infra.kafkaBrokers, topic)).map((m) => seqOf(m.value))).toEqual(upTo(batchSize));

    start({ pool: db.pool, batchSize });
    const read = await readTopic(infra.kafkaBrokers, topic, (m) => m.length >= 50);
    expect(read.map((m) => seqOf(m.value))).toEqual(upTo(50));
  });
});
