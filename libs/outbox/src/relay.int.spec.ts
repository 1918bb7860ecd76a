import { afterAll, afterEach, beforeAll, describe, expect, inject, it } from 'vitest';
import pg from 'pg';
import { createKafka, createPublisher, createServedTopics, ensureTopics, type KafkaPublisher } from '@labelflow/messaging';
import { createMetrics } from '@labelflow/telemetry';
import { captureLogs, createTestDatabase, eventually, metricValue, readAll, readTopic, uniqueName, createTestPool } from '@labelflow/testing';
import {
  BUNDLE_TOPIC,
  countPendingSql,
  createOutboxRelay,
  DEFAULT_MAX_BATCH_BYTES,
  enqueue,
  enqueueBundle,
  outboxFailedRowsMigrationSql,
  outboxLeanRowsMigrationSql,
  outboxMigrationSql,
  outboxPendingMigrationSql,
  outboxTableSql,
  sizeOf,
  type OutboxRelay,
  type PublishedMessage,
  type Publisher,
} from './index';
import type { Pending } from './relay-batch';
import { createRowMarks, leaseSessionSql, readSessionSql, readSql } from './relay-rows';

const infra = inject('infra');
const logger = captureLogs({ service: 'outbox-test' }).logger;

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
/** Each key's seqs in the order first seen: a row the relay sent again (it may, after a broker refusal) counts once. */
const firstSeqsByKey = (messages: readonly { key: Buffer | null; value: Buffer | null }[]) => {
  const byKey = new Map<string, number[]>();
  for (const m of messages) {
    const seqs = byKey.get(m.key!.toString()) ?? [];
    if (!seqs.includes(seqOf(m.value))) seqs.push(seqOf(m.value));
    byKey.set(m.key!.toString(), seqs);
  }
  return Object.fromEntries([...byKey].sort(([a], [b]) => a.localeCompare(b)));
};
/** Resolves the next time `signal()` is called; rejects after `timeoutMs` with `what` (a deadline, not a wait for a race). */
function nextSignal(what: string, timeoutMs = 10_000) {
  let signal!: () => void;
  let timer: ReturnType<typeof setTimeout> | undefined;
  const done = new Promise<void>((resolve, reject) => {
    signal = () => {
      clearTimeout(timer);
      resolve();
    };
    timer = setTimeout(() => reject(new Error(`${what} did not happen within ${timeoutMs} ms`)), timeoutMs);
  });
  return { done, signal };
}

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
    publisher = createPublisher({ brokers: infra.kafkaBrokers.split(','), clientId: 'outbox-test' });
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

  const freshTopic = async (configEntries: { name: string; value: string }[] = []) => {
    const topic = uniqueName('outbox-topic');
    if (configEntries.length === 0) {
      await ensureTopics(kafka, [topic], 3);
      return topic;
    }
    const admin = kafka.admin();
    await admin.connect();
    try {
      await createServedTopics(admin, [{ topic, numPartitions: 3, configEntries }]);
    } finally {
      await admin.disconnect();
    }
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
    // A poll no test outlives: once the relay leads (and listens), only a NOTIFY can wake it.
    start({ pollMs: 3_600_000 });
    await eventually(async () => expect((await pool.query(`SELECT count(*)::int AS n FROM pg_locks l JOIN pg_database d ON d.oid = l.database WHERE l.locktype = 'advisory' AND d.datname = current_database()`)).rows[0].n).toBeGreaterThan(0));
    for (let batch = 0; batch < 5; batch++) {
      const client = await pool.connect();
      await client.query('BEGIN');
      await enqueue(client, 'outbox_test', [...rows(topic, 'task-a', 4, batch * 4), ...rows(topic, 'task-b', 4, batch * 4)]);
      await client.query('COMMIT');
      client.release();
    }
    const read = await readTopic(infra.kafkaBrokers, topic, (m) => m.length >= 40);
    for (const key of ['task-a', 'task-b']) {
      const seqs = read.filter((m) => m.key?.toString() === key).map((m) => (JSON.parse(m.value!.toString()) as { seq: number }).seq);
      expect(seqs).toEqual(Array.from({ length: 20 }, (_, i) => i));
    }
    await eventually(async () => expect((await pool.query(countPendingSql)).rows[0].n).toBe(0));
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
    await readTopic(infra.kafkaBrokers, topic, (m) => m.some((x) => x.key?.toString() === 'real'));
    // Once nothing is pending, the whole topic: a ghost on another partition would be read after 'real'.
    await eventually(async () => expect((await pool.query(countPendingSql)).rows[0].n).toBe(0));
    expect((await readAll(infra.kafkaBrokers, topic)).map((m) => m.key?.toString())).toEqual(['real']);
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
    await eventually(async () => expect((await pool.query(countPendingSql)).rows[0].n).toBe(0));
  });

  it('has PostgreSQL watch the leader\'s session with TCP keepalives, so a leader whose host vanished loses the lock in seconds, not hours', async () => {
    // Which session ran what: the leader's LISTEN session must also have run the keepalive settings.
    const sessions = new Map<pg.Client, string[]>();
    class RecordingClient extends pg.Client {
      override query(...args: unknown[]): never {
        const text = typeof args[0] === 'string' ? args[0] : (args[0] as { text?: unknown } | undefined)?.text;
        if (typeof text === 'string') sessions.set(this, [...(sessions.get(this) ?? []), text]);
        return (super.query as (...a: unknown[]) => never)(...args);
      }
    }
    const db = await freshDatabase();
    start({ pool: poolFor(db.url, { Client: RecordingClient }) });
    await eventually(async () => expect(await lockHolder(db.pool)).not.toBeNull());
    const leaderSession = [...sessions.values()].find((texts) => texts.some((t) => t.startsWith('LISTEN')));
    expect(leaderSession?.some((t) => t.includes(leaseSessionSql))).toBe(true);
    // The settings take on a TCP session (on a Unix socket PostgreSQL ignores them, and shows 0).
    const probe = new pg.Client({ connectionString: db.url });
    await probe.connect();
    try {
      await probe.query(leaseSessionSql);
      const shown = async (name: string) => (await probe.query<Record<string, string>>(`SHOW ${name}`)).rows[0]![name];
      const tcp = (await probe.query<{ tcp: boolean }>('SELECT inet_client_addr() IS NOT NULL AS tcp')).rows[0]!.tcp;
      expect(tcp).toBe(true); // the test servers are reached over TCP, as a relay on another host would be
      expect([await shown('tcp_keepalives_idle'), await shown('tcp_keepalives_interval'), await shown('tcp_keepalives_count'), await shown('tcp_user_timeout')]).toEqual(['10', '5', '3', '30000']);
    } finally {
      await probe.end();
    }
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
    const marked = await db.pool.query<{ seq: number; sent: boolean }>(`SELECT (payload->>'seq')::int AS seq, NOT EXISTS (SELECT 1 FROM outbox_pending p WHERE p.id = o.id) AS sent FROM outbox o ORDER BY id`);
    expect(marked.rows.filter((r) => r.sent).map((r) => r.seq)).toEqual(upTo(batchSize));
    expect(marked.rows.filter((r) => !r.sent)).toHaveLength(50 - batchSize);
    expect((await readAll(infra.kafkaBrokers, topic)).map((m) => seqOf(m.value))).toEqual(upTo(batchSize));

    start({ pool: db.pool, batchSize });
    const read = await readTopic(infra.kafkaBrokers, topic, (m) => m.length >= 50);
    expect(read.map((m) => seqOf(m.value))).toEqual(upTo(50));
  });

  it('publishes a backlog of maximal rows for one partition in several batches, each under the byte limit', async () => {
    const topic = await freshTopic();
    // LabelSubmitted at its schema's limit: 1,000 annotations with 200-character labels (~240 KB).
    const maximal = (seq: number) => ({
      topic,
      key: 'task-max',
      eventId: crypto.randomUUID(),
      eventType: 'LabelSubmitted',
      payload: { key: 'task-max', seq, annotations: Array.from({ length: 1_000 }, (_, i) => ({ label: String(i).padEnd(200, 'x'), confidence: 0.5 })) },
    });
    const batches: number[][] = [];
    const recording: Publisher = {
      send: async (messages) => {
        batches.push(messages.map(sizeOf));
        await publisher.send(messages);
      },
    };
    const backlog = Array.from({ length: 8 }, (_, i) => maximal(i));
    await enqueue(pool, 'outbox_test', backlog);
    start({ publisher: recording });
    const read = await readTopic(infra.kafkaBrokers, topic, (m) => m.length >= backlog.length);
    expect(read.map((m) => seqOf(m.value))).toEqual(upTo(backlog.length));
    const total = batches.flat().reduce((a, b) => a + b, 0);
    // One request would have been refused by the topic's 1 MB max.message.bytes, again and again.
    expect(total).toBeGreaterThan(1_048_588);
    expect(batches.length).toBeGreaterThanOrEqual(3);
    for (const batch of batches) expect(batch.reduce((a, b) => a + b, 0)).toBeLessThanOrEqual(DEFAULT_MAX_BATCH_BYTES);
    await eventually(async () => expect((await pool.query(countPendingSql)).rows[0].n).toBe(0));
  });

  it('parks a row too large for its topic on its own, publishes the rows behind it and holds back the later rows of its key', async () => {
    // 2 KiB per record batch: the 8 KB row never fits, and neither do many small rows at once.
    const topic = await freshTopic([{ name: 'max.message.bytes', value: '2048' }]);
    const metrics = createMetrics({ service: 'outbox-test', defaults: false });
    const small = (key: string, seq: number) => ({ topic, key, eventId: crypto.randomUUID(), eventType: 'Test', payload: { key, seq, note: 'n'.repeat(120) } });
    const huge = (key: string, seq: number) => ({ ...small(key, seq), payload: { key, seq, blob: 'x'.repeat(8_000) } });
    await enqueue(pool, 'outbox_test', [
      small('task-a', 0),
      small('task-big', 0),
      huge('task-big', 1),
      small('task-b', 0),
      small('task-big', 2),
      ...Array.from({ length: 10 }, (_, j) => [small('task-a', j + 1), small('task-b', j + 1), small('task-c', j)]).flat(),
    ]);
    start({ metrics });
    const expected = { 'task-a': upTo(11), 'task-b': upTo(11), 'task-big': [0], 'task-c': upTo(10) };
    const count = (m: readonly { key: Buffer | null; value: Buffer | null }[]) => Object.values(firstSeqsByKey(m)).flat().length;
    const read = await readTopic(infra.kafkaBrokers, topic, (m) => count(m) >= 33);
    expect(firstSeqsByKey(read)).toEqual(expected);
    const state = async () =>
      (
        await pool.query<{ key: string; seq: number; published: boolean; failure: string | null }>(
          `SELECT message_key AS key, (payload->>'seq')::int AS seq, failed_at IS NULL AND NOT EXISTS (SELECT 1 FROM outbox_pending p WHERE p.id = o.id) AS published, failure
           FROM outbox o WHERE message_key = 'task-big' OR failed_at IS NOT NULL ORDER BY id`,
        )
      ).rows;
    await eventually(async () =>
      expect(await state()).toEqual([
        { key: 'task-big', seq: 0, published: true, failure: null },
        { key: 'task-big', seq: 1, published: false, failure: expect.stringContaining('too large for topic') },
        { key: 'task-big', seq: 2, published: false, failure: expect.stringContaining('held') },
      ]),
    );
    const rendered = await metrics.render();
    expect(metricValue(rendered, 'outbox_failed_total', { reason: 'too_large' })).toBe(1);
    expect(metricValue(rendered, 'outbox_failed_total', { reason: 'held' })).toBe(1);

    // Nothing waits behind the parked row, and its key stays held back.
    await enqueue(pool, 'outbox_test', [small('task-big', 3), small('task-c', 10)]);
    const after = await readTopic(infra.kafkaBrokers, topic, (m) => count(m) >= 34 && firstSeqsByKey(m)['task-c']?.includes(10) === true);
    expect(firstSeqsByKey(after)).toEqual({ ...expected, 'task-c': upTo(11) });
    await eventually(async () => expect((await state()).at(-1)).toEqual({ key: 'task-big', seq: 3, published: false, failure: expect.stringContaining('held') }));
    await eventually(async () => expect((await pool.query(countPendingSql)).rows[0].n).toBe(0));
  });

  it('leaves a row held by a read pending when its key was released before the park, and publishes the key\'s rows in order', async () => {
    const topic = await freshTopic();
    await enqueue(pool, 'outbox_test', rows(topic, 'task-k', 3));
    const ids = (await pool.query<{ id: string }>('SELECT id::text FROM outbox ORDER BY id')).rows.map((r) => r.id);
    // The first row is parked, as a refusal of the broker would have left it.
    await pool.query(`WITH p AS (UPDATE outbox SET failed_at = now(), failure = 'too large: test' WHERE id = $1) DELETE FROM outbox_pending WHERE id = $1`, [ids[0]]);
    const marks = createRowMarks({ pool, logger });
    const held = (id: string): Pending => ({ id, message: { topic, key: 'task-k', value: '', headers: {} }, bytes: 0, held: true, ends: 1 });
    await marks.parkHeld([held(ids[1]!)]);
    // The operator releases the key's parked rows; a read that ran before had held the third row.
    await pool.query(`UPDATE outbox SET failed_at = NULL, failure = NULL WHERE message_key = 'task-k' AND failed_at IS NOT NULL`);
    await marks.parkHeld([held(ids[2]!)]);
    const state = await pool.query<{ parked: boolean; pending: boolean }>(
      'SELECT failed_at IS NOT NULL AS parked, EXISTS (SELECT 1 FROM outbox_pending p WHERE p.id = o.id) AS pending FROM outbox o ORDER BY id',
    );
    expect(state.rows).toEqual([0, 1, 2].map(() => ({ parked: false, pending: true })));
    start();
    await eventually(async () => expect((await readAll(infra.kafkaBrokers, topic)).map((m) => seqOf(m.value))).toEqual(upTo(3)));
  });

  it('reads the next batch while the current one is being sent, and publishes every row once, in id order', async () => {
    const db = await freshDatabase();
    const topic = await freshTopic();
    let readIssued: (() => void) | undefined;
    class ReadWatchingClient extends pg.Client {
      override query(...args: unknown[]): never {
        const text = typeof args[0] === 'string' ? args[0] : (args[0] as { text?: unknown } | undefined)?.text;
        if (typeof text === 'string' && text.includes('AS behind')) readIssued?.();
        return (super.query as (...a: unknown[]) => never)(...args);
      }
    }
    const total = 1_000;
    const batchSize = 50;
    const sent: number[] = [];
    let sends = 0;
    const watching: Publisher = {
      send: async (messages) => {
        sends++;
        // Until the last batches, the relay must read ahead while this send is in flight: this
        // send does not return before it has. A relay that reads only between sends never would.
        if (sends <= 10) {
          const read = nextSignal(`a read during send ${sends}`);
          readIssued = read.signal;
          await read.done;
        }
        sent.push(...messages.map((m) => (JSON.parse(m.value) as { seq: number }).seq));
        await publisher.send(messages);
      },
    };
    const keys = ['task-a', 'task-b', 'task-c', 'task-d', 'task-e'];
    await enqueue(
      db.pool,
      'outbox_test',
      upTo(total).map((seq) => ({ topic, key: keys[seq % keys.length]!, eventId: crypto.randomUUID(), eventType: 'Test', payload: { seq } })),
    );
    start({ pool: poolFor(db.url, { Client: ReadWatchingClient }), publisher: watching, batchSize });
    const read = await readTopic(infra.kafkaBrokers, topic, (m) => m.length >= total);
    expect(sent).toEqual(upTo(total));
    expect(sends).toBeGreaterThanOrEqual(total / batchSize);
    for (const [i, key] of keys.entries()) {
      expect(read.filter((m) => m.key?.toString() === key).map((m) => seqOf(m.value))).toEqual(upTo(total).filter((seq) => seq % keys.length === i));
    }
    await eventually(async () => expect((await db.pool.query(countPendingSql)).rows[0].n).toBe(0));
    expect(await readAll(infra.kafkaBrokers, topic)).toHaveLength(total);
  });

  it('publishes a row that commits after read-ahead passed its id before any later row of its key', async () => {
    const db = await freshDatabase();
    const topic = await freshTopic();
    const firstSend = nextSignal('the first send');
    let release!: () => void;
    const released = new Promise<void>((resolve) => (release = resolve));
    const held: Publisher = {
      send: async (messages) => {
        firstSend.signal();
        await released;
        await publisher.send(messages);
      },
    };
    // The late row takes the lowest id, then stays uncommitted while the rows after it are read.
    const late = await db.pool.connect();
    await late.query('BEGIN');
    await enqueue(late, 'outbox_test', rows(topic, 'task-late', 1));
    await enqueue(db.pool, 'outbox_test', rows(topic, 'other', 30));
    start({ pool: db.pool, publisher: held, batchSize: 5 });
    await firstSend.done;
    await late.query('COMMIT');
    late.release();
    // Caused by the late row (it follows its commit), so it must never be published before it.
    await enqueue(db.pool, 'outbox_test', rows(topic, 'task-late', 1, 1));
    release();
    const read = await readTopic(infra.kafkaBrokers, topic, (m) => m.length >= 32);
    expect(read.filter((m) => m.key?.toString() === 'task-late').map((m) => seqOf(m.value))).toEqual([0, 1]);
    expect(read.filter((m) => m.key?.toString() === 'other').map((m) => seqOf(m.value))).toEqual(upTo(30));
  });

  it('reads the pending rows by probing each id, whatever the number of published rows kept', async () => {
    const db = await freshDatabase();
    const topic = await freshTopic();
    for (let batch = 0; batch < 20; batch++) await enqueue(db.pool, 'outbox_test', rows(topic, `task-${batch}`, 1_000));
    // Statistics taken while the backlog was pending, as they are under load (the service's upkeep
    // analyzes now and then): then 20,000 rows kept after publishing (the retention keeps a week of
    // them), 10 still pending. The read runs as on the relay's own session.
    await db.pool.query('ANALYZE outbox');
    await db.pool.query('ANALYZE outbox_pending');
    await db.pool.query('DELETE FROM outbox_pending WHERE id NOT IN (SELECT id FROM outbox_pending ORDER BY id DESC LIMIT 10)');
    const session = await db.pool.connect();
    cleanups.push(async () => session.release());
    await session.query(readSessionSql);
    const { rows: plan } = await session.query<{ 'QUERY PLAN': [{ Plan: { 'Shared Hit Blocks': number; 'Shared Read Blocks': number; 'Actual Rows': number } }] }>(
      `EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) ${readSql}`.replace(/\$(\d)/g, (_, n: string) => ({ '1': '0', '2': '786432', '3': '500', '4': "'{}'", '5': "'{}'" })[n] ?? ''),
    );
    const top = plan[0]!['QUERY PLAN'][0].Plan;
    expect(top['Actual Rows']).toBe(10);
    // A join over the outbox walks its 20,000 rows: well over 1,000 blocks. Ten probes take tens.
    expect(top['Shared Hit Blocks'] + top['Shared Read Blocks']).toBeLessThan(300);
  });

  it('prunes published rows older than the retention once they are sent, and keeps younger and parked ones', async () => {
    const db = await freshDatabase();
    const topic = await freshTopic();
    await enqueue(db.pool, 'outbox_test', [...rows(topic, 'task-a', 6), ...rows(topic, 'task-parked', 1)]);
    await db.pool.query(`UPDATE outbox SET created_at = now() - interval '2 hours' WHERE message_key = 'task-parked' OR (payload->>'seq')::int < 3`);
    await db.pool.query(
      `WITH p AS (UPDATE outbox SET failed_at = now(), failure = 'test' WHERE message_key = 'task-parked') DELETE FROM outbox_pending WHERE id IN (SELECT id FROM outbox WHERE message_key = 'task-parked')`,
    );
    start({ pool: db.pool, retentionMs: 60 * 60_000, batchSize: 4 });
    const left = async () =>
      (await db.pool.query<{ key: string; seq: number }>(`SELECT message_key AS key, (payload->>'seq')::int AS seq FROM outbox ORDER BY id`)).rows.map((r) => `${r.key}:${r.seq}`);
    await eventually(async () => expect(await left()).toEqual(['task-a:3', 'task-a:4', 'task-a:5', 'task-parked:0']));
    expect((await readAll(infra.kafkaBrokers, topic)).map((m) => seqOf(m.value))).toEqual(upTo(6));
  });

  it('prunes a backlog of expired rows a chunk at a time, between drains, until none is left', async () => {
    const db = await freshDatabase();
    const topic = await freshTopic();
    for (let part = 0; part < 3; part++) await enqueue(db.pool, 'outbox_test', rows(topic, `task-${part}`, 4_000));
    await db.pool.query(`UPDATE outbox SET created_at = now() - interval '2 hours'`);
    start({ pool: db.pool, retentionMs: 60 * 60_000, pollMs: 50 });
    // 12,000 rows: three chunks of 5,000, the last one short.
    await eventually(async () => expect((await db.pool.query<{ n: number }>('SELECT count(*)::int AS n FROM outbox')).rows[0]?.n).toBe(0), { timeoutMs: 30_000 });
    expect(await readAll(infra.kafkaBrokers, topic)).toHaveLength(12_000);
  });

  it('publishes nothing from an outbox table without the pending-rows step, says which step to apply, and publishes every row in order once it is', async () => {
    const db = await freshDatabase();
    await db.pool.query(`DROP VIEW outbox_messages; DROP TABLE outbox_pending; DROP TABLE outbox; ${outboxTableSql} ${outboxFailedRowsMigrationSql} ${outboxLeanRowsMigrationSql}`);
    const topic = await freshTopic();
    await enqueue(db.pool, 'outbox_test', rows(topic, 'task-a', 20));
    // A row the previous relay published stays published.
    await db.pool.query(`UPDATE outbox SET published_at = now() WHERE (payload->>'seq')::int < 5`);
    const { logger: errors, lines } = captureLogs({ service: 'outbox-test', level: 'error' });
    start({ pool: db.pool, batchSize: 7, logger: errors });
    const refusals = () => lines.filter((l) => String((l.err as { message?: unknown } | undefined)?.message).includes('apply outboxPendingMigrationSql')).length;
    await eventually(async () => expect(refusals()).toBeGreaterThan(0));
    await enqueue(db.pool, 'outbox_test', rows(topic, 'task-a', 20, 20));
    // Judged once the relay has looked again since those rows committed (the second attempt from
    // now: the first may have begun before the commit), not before it could have sent them.
    const before = refusals();
    await eventually(async () => expect(refusals()).toBeGreaterThan(before + 1));
    expect(await readAll(infra.kafkaBrokers, topic)).toEqual([]);
    await db.pool.query(outboxPendingMigrationSql);
    const read = await readTopic(infra.kafkaBrokers, topic, (m) => m.length >= 35);
    expect(read.map((m) => seqOf(m.value))).toEqual(upTo(40).slice(5));
    await eventually(async () => expect((await db.pool.query(countPendingSql)).rows[0].n).toBe(0));
    const columns = await db.pool.query<{ name: string }>(`SELECT attname AS name FROM pg_attribute WHERE attrelid = 'outbox'::regclass AND attname = 'published_at' AND NOT attisdropped`);
    expect(columns.rows).toEqual([]);
  });

  it('publishes the rows of a jsonb outbox written before the lean-rows step and after it, each key in order, the new ones byte for byte as written', async () => {
    const db = await freshDatabase();
    await db.pool.query(`DROP VIEW outbox_messages; DROP TABLE outbox_pending; DROP TABLE outbox; ${outboxTableSql} ${outboxFailedRowsMigrationSql}`);
    const topic = await freshTopic();
    await enqueue(db.pool, 'outbox_test', [...rows(topic, 'task-a', 10), ...rows(topic, 'task-b', 10)]);
    await db.pool.query(outboxLeanRowsMigrationSql);
    const types = await db.pool.query<{ payload: string; headers: string; unique_indexes: number }>(
      `SELECT (SELECT format_type(atttypid, atttypmod) FROM pg_attribute WHERE attrelid = 'outbox'::regclass AND attname = 'payload') AS payload,
              (SELECT format_type(atttypid, atttypmod) FROM pg_attribute WHERE attrelid = 'outbox'::regclass AND attname = 'headers') AS headers,
              (SELECT count(*)::int FROM pg_index WHERE indrelid = 'outbox'::regclass AND indisunique AND NOT indisprimary) AS unique_indexes`,
    );
    expect(types.rows[0]).toEqual({ payload: 'json', headers: 'json', unique_indexes: 0 });
    await db.pool.query(outboxPendingMigrationSql);
    const later = [...rows(topic, 'task-a', 10, 10), ...rows(topic, 'task-b', 10, 10)];
    await enqueue(db.pool, 'outbox_test', later);
    start({ pool: db.pool, batchSize: 7 });
    const read = await readTopic(infra.kafkaBrokers, topic, (m) => m.length >= 40);
    for (const key of ['task-a', 'task-b']) expect(read.filter((m) => m.key?.toString() === key).map((m) => seqOf(m.value))).toEqual(upTo(20));
    const sent = new Map(read.map((m) => [m.value!.toString(), m]));
    for (const m of later) expect(sent.has(JSON.stringify(m.payload))).toBe(true);
  });

  describe('bundles (many messages in one outbox row)', () => {
    const recording = (into: number[][]): Publisher => ({
      send: async (messages) => {
        into.push(messages.map((m) => seqOf(Buffer.from(m.value))));
        await publisher.send(messages);
      },
    });

    it('publishes a bundle of several rows between the plain rows around it, each key in order, in sends no larger than a batch, and counts its messages', async () => {
      const topic = await freshTopic();
      const metrics = createMetrics({ service: 'outbox-test', defaults: false });
      await enqueue(pool, 'outbox_test', rows(topic, 'task-a', 5));
      // A 1 KiB limit cuts the bundle's 25 messages into several rows.
      await enqueueBundle(pool, 'outbox_test', [...rows(topic, 'task-a', 10, 5), ...rows(topic, 'task-b', 15)], 1_024);
      await enqueue(pool, 'outbox_test', [...rows(topic, 'task-a', 5, 15), ...rows(topic, 'task-b', 5, 15)]);
      expect((await pool.query<{ n: number }>('SELECT count(*)::int AS n FROM outbox WHERE messages IS NOT NULL')).rows[0]?.n).toBeGreaterThan(2);
      const sends: number[][] = [];
      start({ publisher: recording(sends), batchSize: 10, metrics });
      const read = await readTopic(infra.kafkaBrokers, topic, (m) => m.length >= 40);
      expect(firstSeqsByKey(read)).toEqual({ 'task-a': upTo(20), 'task-b': upTo(20) });
      expect(read).toHaveLength(40);
      for (const send of sends) expect(send.length).toBeLessThanOrEqual(10);
      await eventually(async () => expect((await pool.query(countPendingSql)).rows[0].n).toBe(0));
      expect(metricValue(await metrics.render(), 'outbox_published_total')).toBe(40);
    });

    it('lists a bundle message by message in outbox_messages, as plain rows of the same messages would read', async () => {
      const topic = await freshTopic();
      const messages = [...rows(topic, 'task-a', 2), ...rows(topic, 'task-b', 1)].map((m) => ({ ...m, headers: { 'event-type': 'Test' } }));
      await enqueueBundle(pool, 'outbox_test', messages);
      const listed = await pool.query<{ event_id: string; topic: string; message_key: string; event_type: string; payload: unknown; headers: unknown; seq: string }>(
        'SELECT event_id, topic, message_key, event_type, payload, headers, seq FROM outbox_messages ORDER BY id, seq',
      );
      expect(listed.rows).toEqual(messages.map((m, i) => ({ event_id: m.eventId, topic, message_key: m.key, event_type: 'Test', payload: m.payload, headers: { 'event-type': 'Test' }, seq: String(i + 1) })));
      const [row] = (await pool.query<{ topic: string; event_id: string; message_key: string }>('SELECT topic, event_id, message_key FROM outbox')).rows;
      expect(row).toEqual({ topic: BUNDLE_TOPIC, event_id: messages[0]?.eventId, message_key: 'task-a' });
    });

    it('sends a bundle whole again when the relay stops half way through it, so none of its messages is lost', async () => {
      const db = await freshDatabase();
      const topic = await freshTopic();
      const second = nextSignal('the second send of the bundle');
      let release!: () => void;
      const released = new Promise<void>((resolve) => (release = resolve));
      let sends = 0;
      const stalling: Publisher = {
        send: async (messages) => {
          sends++;
          if (sends === 2) {
            second.signal();
            await released;
          }
          await publisher.send(messages);
        },
      };
      await enqueueBundle(db.pool, 'outbox_test', rows(topic, 'task-a', 30));
      const relay = start({ pool: db.pool, publisher: stalling, batchSize: 10 });
      await second.done;
      const closed = relay.close();
      release();
      await closed;
      expect(sends).toBe(2);
      // Two sends of three acknowledged: the bundle is still pending.
      expect((await db.pool.query(countPendingSql)).rows[0].n).toBe(1);
      expect((await readAll(infra.kafkaBrokers, topic)).map((m) => seqOf(m.value))).toEqual(upTo(20));

      start({ pool: db.pool, batchSize: 10 });
      const read = await readTopic(infra.kafkaBrokers, topic, (m) => m.length >= 50);
      expect(read.map((m) => seqOf(m.value))).toEqual([...upTo(20), ...upTo(30)]);
      await eventually(async () => expect((await db.pool.query(countPendingSql)).rows[0].n).toBe(0));
    });

    it('parks a bundle behind a parked row of one of its keys, and a parked bundle holds the later rows of each of its keys', async () => {
      const topic = await freshTopic([{ name: 'max.message.bytes', value: '2048' }]);
      const small = (key: string, seq: number) => ({ topic, key, eventId: crypto.randomUUID(), eventType: 'Test', payload: { key, seq } });
      const huge = (key: string, seq: number) => ({ ...small(key, seq), payload: { key, seq, blob: 'x'.repeat(8_000) } });
      // A plain row too large: parked. The bundle after it names its key, so it is parked too.
      await enqueue(pool, 'outbox_test', [huge('task-big', 0)]);
      await enqueueBundle(pool, 'outbox_test', [small('task-x', 0), small('task-big', 1)]);
      // A bundle with a message too large: parked whole; task-y's message before it went out.
      await enqueueBundle(pool, 'outbox_test', [small('task-y', 0), huge('task-z', 0), small('task-w', 0)]);
      // Later rows of the parked bundle's keys wait; a key of neither goes out.
      await enqueue(pool, 'outbox_test', [small('task-y', 1), small('task-w', 1), small('task-free', 0)]);
      start();
      const state = async () =>
        (
          await pool.query<{ keys: string; parked: boolean; failure: string | null }>(
            `SELECT (SELECT string_agg(message_key, ',' ORDER BY seq) FROM outbox_messages m WHERE m.id = o.id) AS keys,
                    failed_at IS NOT NULL AS parked, split_part(failure, ':', 1) AS failure
             FROM outbox o ORDER BY id`,
          )
        ).rows;
      await eventually(async () =>
        expect(await state()).toEqual([
          { keys: 'task-big', parked: true, failure: expect.stringMatching(/^too large/) },
          { keys: 'task-x,task-big', parked: true, failure: 'held' },
          { keys: 'task-y,task-z,task-w', parked: true, failure: expect.stringMatching(/^too large/) },
          { keys: 'task-y', parked: true, failure: 'held' },
          { keys: 'task-w', parked: true, failure: 'held' },
          { keys: 'task-free', parked: false, failure: null },
        ]),
      );
      // What reached the topic keeps each key's order. A bundle is not atomic: some of its messages
      // can go out before the relay parks it (the broker takes a refused request's other
      // partitions, and task-x's message precedes task-big's in its bundle); a released bundle is
      // sent again whole, and consumers dedup. Read once nothing is pending: task-free's row starts
      // out unparked too, so the state above holds before it is sent.
      await eventually(async () => expect((await pool.query(countPendingSql)).rows[0].n).toBe(0));
      const sent = firstSeqsByKey(await readAll(infra.kafkaBrokers, topic));
      for (const seqs of Object.values(sent)) expect(seqs).toEqual(upTo(seqs.length));
      expect(sent['task-free']).toEqual([0]);
      expect(sent['task-big']).toBeUndefined();
    });

    it('parks a bundle it cannot read instead of stopping at it, publishes the rows behind it, and holds back the later rows of its key', async () => {
      const topic = await freshTopic();
      const metrics = createMetrics({ service: 'outbox-test', defaults: false });
      // Written by hand, not by appendBundleSql: frames of two fields, and headers that are not JSON.
      await pool.query(
        `INSERT INTO outbox (event_id, topic, message_key, event_type, payload, headers, messages) VALUES
           ('bad-1', $1, 'task-bad', 'Test', 'null', '{}', 'bad-1' || E'\\x1f' || 'only two fields'),
           ('bad-2', $1, 'task-worse', 'Test', 'null', '{}', concat_ws(E'\\x1f', 'bad-2', $2::text, 'task-worse', 'Test', '{not json', '{}'))`,
        [BUNDLE_TOPIC, topic],
      );
      await enqueue(pool, 'outbox_test', [...rows(topic, 'task-ok', 5), ...rows(topic, 'task-bad', 1, 1), ...rows(topic, 'task-worse', 1, 1)]);
      start({ metrics });
      const read = await readTopic(infra.kafkaBrokers, topic, (m) => m.length >= 5);
      const state = async () =>
        (await pool.query<{ key: string; failure: string | null }>(`SELECT message_key AS key, split_part(failure, ':', 1) AS failure FROM outbox WHERE message_key <> 'task-ok' ORDER BY id`)).rows;
      await eventually(async () =>
        expect(await state()).toEqual([
          { key: 'task-bad', failure: 'unreadable' },
          { key: 'task-worse', failure: 'unreadable' },
          { key: 'task-bad', failure: 'held' },
          { key: 'task-worse', failure: 'held' },
        ]),
      );
      expect(firstSeqsByKey(read)).toEqual({ 'task-ok': upTo(5) });
      expect(metricValue(await metrics.render(), 'outbox_failed_total', { reason: 'unreadable' })).toBe(2);
      await eventually(async () => expect((await pool.query(countPendingSql)).rows[0].n).toBe(0));
      expect(firstSeqsByKey(await readAll(infra.kafkaBrokers, topic))).toEqual({ 'task-ok': upTo(5) });
    });

    it('holds back the later rows of an unreadable bundle\'s key in the reads that run before its park has committed', async () => {
      const topic = await freshTopic();
      await pool.query(
        `INSERT INTO outbox (event_id, topic, message_key, event_type, payload, headers, messages)
         VALUES ('bad-late', $1, 'task-bad', 'Test', 'null', '{}', 'bad-late' || E'\\x1f' || 'only two fields')`,
        [BUNDLE_TOPIC],
      );
      await enqueue(pool, 'outbox_test', [...rows(topic, 'task-bad', 1, 1), ...rows(topic, 'task-ok', 1)]);
      // The park waits for this lock, so every later read of the drain runs before it commits:
      // one row a read, the row of task-bad in the second, task-ok's in the third.
      const blocker = await pool.connect();
      try {
        await blocker.query('BEGIN');
        await blocker.query(`SELECT 1 FROM outbox WHERE event_id = 'bad-late' FOR UPDATE`);
        start({ batchSize: 1 });
        await readTopic(infra.kafkaBrokers, topic, (m) => m.some((x) => x.key?.toString() === 'task-ok'));
      } finally {
        await blocker.query('COMMIT');
        blocker.release();
      }
      await eventually(async () =>
        expect((await pool.query(`SELECT message_key AS key, split_part(failure, ':', 1) AS failure FROM outbox WHERE message_key = 'task-bad' ORDER BY id`)).rows).toEqual([
          { key: 'task-bad', failure: 'unreadable' },
          { key: 'task-bad', failure: 'held' },
        ]),
      );
      expect(firstSeqsByKey(await readAll(infra.kafkaBrokers, topic))).toEqual({ 'task-ok': [0] });
    });

    it('is refused by the broker when a relay that knows no bundles sends one as a plain row, so such a relay marks nothing', async () => {
      await expect(publisher.send([{ topic: BUNDLE_TOPIC, key: 'task-a', value: 'null', headers: {} }])).rejects.toThrow(/INVALID_TOPIC/);
    });
  });
});
