import { afterAll, afterEach, beforeAll, describe, expect, inject, it } from 'vitest';
import pg from 'pg';
import { createKafka, createPublisher, ensureTopics, type KafkaPublisher } from '@labelflow/messaging';
import { createLogger } from '@labelflow/telemetry';
import { createTestDatabase, eventually, readTopic, uniqueName, createTestPool } from '@labelflow/testing';
import { createOutboxRelay, enqueue, outboxMigrationSql, type OutboxRelay, type PublishedMessage, type Publisher } from './index';

const infra = inject('infra');
const logger = createLogger({ service: 'outbox-test', level: 'silent' });

describe('the outbox relay', () => {
  let pool: pg.Pool;
  let drop: () => Promise<void>;
  let publisher: KafkaPublisher;
  const relays: OutboxRelay[] = [];
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
});
