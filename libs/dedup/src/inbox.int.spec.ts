import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import pg from 'pg';
import { createTestDatabase, uniqueName, createTestPool } from '@labelflow/testing';
import { formatKey, inboxMigrationSql, recordInInbox, recordManyInInbox } from './index';

const infra = inject('infra');

describe('the PostgreSQL inbox', () => {
  let pool: pg.Pool;
  let drop: () => Promise<void>;
  beforeAll(async () => {
    const db = await createTestDatabase(infra.pgUrl, uniqueName('inbox'));
    drop = db.drop;
    pool = createTestPool(db.url, 20);
    await pool.query(inboxMigrationSql);
  });
  afterAll(async () => {
    await pool.end();
    await drop();
  });

  const entry = (over: Partial<Parameters<typeof recordInInbox>[1]> = {}) => ({
    taskId: '5b0c1f9e-1111-4111-8111-000000000001',
    eventType: 'LabelSubmitted',
    attempt: 1,
    eventId: crypto.randomUUID(),
    source: 'test/0@0',
    ...over,
  });

  it('accepts a key once and reports every later delivery as a duplicate, even with a new event id', async () => {
    const taskId = crypto.randomUUID();
    expect(await recordInInbox(pool, entry({ taskId }))).toBe(true);
    expect(await recordInInbox(pool, entry({ taskId }))).toBe(false);
  });

  it('lets the same step through again for the next attempt of the task (rework after a rejection)', async () => {
    const taskId = crypto.randomUUID();
    expect(await recordInInbox(pool, entry({ taskId, attempt: 1 }))).toBe(true);
    expect(await recordInInbox(pool, entry({ taskId, attempt: 2 }))).toBe(true);
    expect(await recordInInbox(pool, entry({ taskId, attempt: 2 }))).toBe(false);
  });

  it('lets exactly one of twenty concurrent transactions with the same key commit an effect', async () => {
    const taskId = crypto.randomUUID();
    await pool.query('CREATE TABLE IF NOT EXISTS effects (task_id uuid, n int)');
    const attempt = async (n: number) => {
      const client = await pool.connect();
      try {
        await client.query('BEGIN');
        const fresh = await recordInInbox(client, entry({ taskId }));
        if (fresh) await client.query('INSERT INTO effects VALUES ($1, $2)', [taskId, n]);
        await client.query('COMMIT');
        return fresh;
      } finally {
        client.release();
      }
    };
    const results = await Promise.all(Array.from({ length: 20 }, (_, n) => attempt(n)));
    expect(results.filter(Boolean)).toHaveLength(1);
    expect((await pool.query('SELECT count(*)::int AS n FROM effects WHERE task_id = $1', [taskId])).rows[0].n).toBe(1);
  });

  it('keeps no key when the transaction that recorded it rolls back, so the retry is applied', async () => {
    const taskId = crypto.randomUUID();
    const client = await pool.connect();
    await client.query('BEGIN');
    expect(await recordInInbox(client, entry({ taskId }))).toBe(true);
    await client.query('ROLLBACK');
    client.release();
    expect(await recordInInbox(pool, entry({ taskId }))).toBe(true);
  });

  it('records a batch in one statement and returns only its new keys, a key repeated inside the batch once', async () => {
    const [a, b, c] = [crypto.randomUUID(), crypto.randomUUID(), crypto.randomUUID()];
    expect(await recordInInbox(pool, entry({ taskId: b }))).toBe(true);
    const fresh = await recordManyInInbox(pool, [entry({ taskId: a }), entry({ taskId: b }), entry({ taskId: c, attempt: 2 }), entry({ taskId: a })]);
    expect([...fresh].sort()).toEqual([formatKey({ taskId: a, eventType: 'LabelSubmitted', attempt: 1 }), formatKey({ taskId: c, eventType: 'LabelSubmitted', attempt: 2 })].sort());
    expect(await recordManyInInbox(pool, [entry({ taskId: a }), entry({ taskId: c, attempt: 2 })])).toEqual(new Set());
  });
});
