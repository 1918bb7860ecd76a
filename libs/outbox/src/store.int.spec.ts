import type pg from 'pg';
import { afterAll, beforeAll, beforeEach, describe, expect, inject, it } from 'vitest';
import { freshDatabase } from '@labelflow/testing';
import { appendBundleSql, appendRowsSql, BUNDLE_TOPIC, countPendingSql, enqueue, enqueueBundle, oldestPendingAgeSeconds, outboxMigrationSql, serializeOutboxRows, type OutboxMessage } from './index';

const infra = inject('infra');
const db = freshDatabase(infra.pgUrl, 'outbox_store', (pool) => pool.query(outboxMigrationSql));
let pool: pg.Pool;
beforeAll(async () => {
  pool = await db.open();
});
afterAll(() => db.close());
beforeEach(async () => {
  await pool.query('TRUNCATE outbox');
});

// Text a byte-for-byte copy would mangle if it were sent as anything but UTF-8: accents, CJK, an
// emoji outside the BMP, a quote, a newline, and the framing's own separators (escaped by JSON).
const tricky = 'ünïcödé 標注 🏷️ "quoted"\nnext line \u001e\u001f';
const message = (i: number): OutboxMessage => ({
  topic: 'lf.task-events',
  key: `task-${i}`,
  eventId: `event-${i}`,
  eventType: 'TaskCreated',
  payload: { title: `${tricky} ${i}`, n: i, nested: { list: [i, tricky] } },
  headers: { 'event-type': 'TaskCreated', note: tricky },
});
const stored = async () =>
  (
    await pool.query<{ event_id: string; topic: string; message_key: string; event_type: string; payload: unknown; headers: unknown }>(
      'SELECT event_id, topic, message_key, event_type, payload, headers FROM outbox ORDER BY id',
    )
  ).rows.map((r) => ({ eventId: r.event_id, topic: r.topic, key: r.message_key, eventType: r.event_type, payload: r.payload, headers: r.headers }));

describe('outbox rows sent as one Buffer parameter', () => {
  it('stores every message as it was serialized, text beyond Latin-1 included, in the order given', async () => {
    const messages = Array.from({ length: 300 }, (_, i) => message(i));
    await enqueue(pool, 'outbox_store_test', messages);
    expect(await stored()).toEqual(messages);
  });

  it('appends only the rows the caller keeps when a statement of its own filters them on their key', async () => {
    const messages = Array.from({ length: 10 }, (_, i) => message(i));
    const keep = ['task-2', 'task-7'];
    await pool.query(`WITH appended AS (${appendRowsSql('$1', 'm.k = ANY($2::text[])')}) SELECT count(*) FROM appended`, [serializeOutboxRows(messages), keep]);
    expect(await stored()).toEqual(messages.filter((m) => keep.includes(m.key)));
  });

  it('appends nothing for no messages', async () => {
    await pool.query(`WITH appended AS (${appendRowsSql('$1')}) SELECT count(*) FROM appended`, [serializeOutboxRows([])]);
    expect(await stored()).toEqual([]);
  });
});

describe('bundles: many messages in one outbox row', () => {
  const listed = async () =>
    (
      await pool.query<{ event_id: string; topic: string; message_key: string; event_type: string; payload: unknown; headers: unknown }>(
        'SELECT event_id, topic, message_key, event_type, payload, headers FROM outbox_messages ORDER BY id, seq',
      )
    ).rows.map((r) => ({ eventId: r.event_id, topic: r.topic, key: r.message_key, eventType: r.event_type, payload: r.payload, headers: r.headers }));

  it('stores a few messages in one pending row, each listed in outbox_messages as a plain row of it would be, text beyond Latin-1 included', async () => {
    const messages = Array.from({ length: 20 }, (_, i) => message(i));
    await enqueueBundle(pool, 'outbox_store_test', messages);
    const rows = await pool.query<{ topic: string; event_id: string }>('SELECT topic, event_id FROM outbox');
    expect(rows.rows).toEqual([{ topic: BUNDLE_TOPIC, event_id: 'event-0' }]);
    expect((await pool.query(countPendingSql)).rows[0].n).toBe(1);
    expect(await listed()).toEqual(messages);
  });

  it('cuts a larger bundle into consecutive rows of at most the byte limit each, in order', async () => {
    const messages = Array.from({ length: 300 }, (_, i) => message(i));
    await enqueueBundle(pool, 'outbox_store_test', messages, 4_096);
    const rows = await pool.query<{ bytes: number; first: string }>('SELECT octet_length(messages) AS bytes, event_id AS first FROM outbox ORDER BY id');
    const frame = serializeOutboxRows([message(299)]).length;
    expect(rows.rows.length).toBeGreaterThan(10);
    for (const r of rows.rows) expect(r.bytes).toBeLessThan(4_096 + frame + 1);
    expect((await pool.query(countPendingSql)).rows[0].n).toBe(rows.rows.length);
    expect(await listed()).toEqual(messages);
    // Each row is named after its own first message.
    const starts = (await pool.query<{ event_id: string }>('SELECT event_id FROM outbox_messages WHERE seq = 1 ORDER BY id')).rows.map((r) => r.event_id);
    expect(rows.rows.map((r) => r.first)).toEqual(starts);
  });

  it("bundles only the rows the caller keeps when a statement of its own filters them on their key, and appends no row when it keeps none", async () => {
    const messages = Array.from({ length: 10 }, (_, i) => message(i));
    const bundle = (keep: string[]) => pool.query(`WITH appended AS (${appendBundleSql('$1', 'm.k = ANY($2::text[])')}) SELECT count(*) FROM appended`, [serializeOutboxRows(messages), keep]);
    await bundle(['task-2', 'task-7']);
    expect(await listed()).toEqual(messages.filter((m) => ['task-2', 'task-7'].includes(m.key)));
    await pool.query('TRUNCATE outbox');
    await bundle([]);
    expect((await pool.query('SELECT count(*)::int AS n FROM outbox')).rows[0].n).toBe(0);
    await enqueueBundle(pool, 'outbox_store_test', []);
    expect((await pool.query('SELECT count(*)::int AS n FROM outbox')).rows[0].n).toBe(0);
  });
});

describe('the pending list (outbox_pending)', () => {
  const ids = async (sql: string) => (await pool.query<{ id: string }>(sql)).rows.map((r) => r.id);
  const pending = () => ids('SELECT id::text FROM outbox_pending ORDER BY id');
  const all = () => ids('SELECT id::text FROM outbox ORDER BY id');

  it('lists the rows an insert appends once it commits, and none of a transaction rolled back', async () => {
    const tx = await pool.connect();
    try {
      await tx.query('BEGIN');
      await enqueue(tx, 'outbox_store_test', [message(0), message(1)]);
      await tx.query('ROLLBACK');
      await tx.query('BEGIN');
      await enqueue(tx, 'outbox_store_test', [message(2), message(3), message(4)]);
      expect((await pool.query(countPendingSql)).rows[0].n).toBe(0);
      await tx.query('COMMIT');
    } finally {
      tx.release();
    }
    expect(await pending()).toEqual(await all());
    expect(await pending()).toHaveLength(3);
  });

  it('takes rows off the list when they are deleted, and empties it when the outbox is truncated', async () => {
    await enqueue(pool, 'outbox_store_test', Array.from({ length: 6 }, (_, i) => message(i)));
    await pool.query(`DELETE FROM outbox WHERE message_key IN ('task-1', 'task-4')`);
    expect(await pending()).toEqual(await all());
    expect(await pending()).toHaveLength(4);
    await pool.query('TRUNCATE outbox');
    expect(await pending()).toEqual([]);
  });

  it('runs the whole schema again on a migrated outbox without error, keeping pending what was pending', async () => {
    await enqueue(pool, 'outbox_store_test', [message(0), message(1)]);
    const [published, waiting] = await all();
    await pool.query('DELETE FROM outbox_pending WHERE id = $1', [published]);
    await pool.query(outboxMigrationSql);
    await pool.query(outboxMigrationSql);
    expect(await pending()).toEqual([waiting]);
    expect(await all()).toEqual([published, waiting]);
  });

  it('puts a parked row back when its failed_at is cleared, and never a published row', async () => {
    await enqueue(pool, 'outbox_store_test', [message(0), message(1), message(2)]);
    const [published, parked, waiting] = await all();
    await pool.query('DELETE FROM outbox_pending WHERE id = $1', [published]);
    await pool.query(`WITH p AS (UPDATE outbox SET failed_at = now(), failure = 'test' WHERE id = $1) DELETE FROM outbox_pending WHERE id = $1`, [parked]);
    expect(await pending()).toEqual([waiting]);
    // The release the README describes, run over every row: only the parked one comes back.
    await pool.query('UPDATE outbox SET failed_at = NULL, failure = NULL');
    expect(await pending()).toEqual([parked, waiting]);
  });
});

describe('the age of the oldest row waiting for the relay', () => {
  it('is 0 with nothing pending, the oldest pending row\'s age otherwise, and leaves out published and parked rows', async () => {
    expect(await oldestPendingAgeSeconds(pool)).toBe(0);
    await enqueue(pool, 'outbox_store_test', [message(1), message(2), message(3)]);
    const ids = (await pool.query<{ id: string }>('SELECT id FROM outbox ORDER BY id')).rows.map((r) => r.id);
    await pool.query(`UPDATE outbox SET created_at = now() - interval '40 seconds' WHERE id = $1`, [ids[0]]);
    await pool.query(`UPDATE outbox SET created_at = now() - interval '20 seconds' WHERE id = $1`, [ids[1]]);
    const age = await oldestPendingAgeSeconds(pool);
    expect(age).toBeGreaterThanOrEqual(40);
    expect(age).toBeLessThan(45);

    await pool.query('DELETE FROM outbox_pending WHERE id = $1', [ids[0]]); // published
    const next = await oldestPendingAgeSeconds(pool);
    expect(next).toBeGreaterThanOrEqual(20);
    expect(next).toBeLessThan(25);
    await pool.query(`WITH parked AS (UPDATE outbox SET failed_at = now() WHERE id = $1) DELETE FROM outbox_pending WHERE id = $1`, [ids[1]]);
    expect(await oldestPendingAgeSeconds(pool)).toBeLessThan(5);
    await pool.query('DELETE FROM outbox_pending');
    expect(await oldestPendingAgeSeconds(pool)).toBe(0);
  });
});
