import type pg from 'pg';
import { afterAll, beforeAll, beforeEach, describe, expect, inject, it } from 'vitest';
import { freshDatabase } from '@labelflow/testing';
import { appendRowsSql, enqueue, outboxMigrationSql, serializeOutboxRows, type OutboxMessage } from './index';

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
