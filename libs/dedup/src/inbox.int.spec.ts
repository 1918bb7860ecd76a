import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import pg from 'pg';
import { createTestDatabase, uniqueName, createTestPool } from '@labelflow/testing';
import { formatKey, inboxMigrationSql, inboxReader, pruneInbox, recordInInbox, recordManyInInbox, type DedupKey } from './index';

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

  it('prunes keys past the retention batch by batch, keeps the younger ones, and stops between batches once told to', async () => {
    const old = crypto.randomUUID();
    const young = crypto.randomUUID();
    for (let attempt = 1; attempt <= 5; attempt++) await recordInInbox(pool, entry({ taskId: old, attempt }));
    await recordInInbox(pool, entry({ taskId: young }));
    await pool.query("UPDATE inbox SET processed_at = now() - interval '2 days' WHERE task_id = $1", [old]);
    const count = async (taskId: string) => (await pool.query<{ n: number }>('SELECT count(*)::int AS n FROM inbox WHERE task_id = $1', [taskId])).rows[0]!.n;

    expect(await pruneInbox(pool, 86_400_000, 2, AbortSignal.abort())).toBe(0);
    expect(await count(old)).toBe(5);
    expect(await pruneInbox(pool, 86_400_000, 2)).toBe(5);
    expect([await count(old), await count(young)]).toEqual([0, 1]);
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

describe('reading the recent inbox keys to warm a Bloom filter', () => {
  let pool: pg.Pool;
  let drop: () => Promise<void>;
  const ago = (minutes: number) => `now() - interval '${minutes} minutes'`;
  /** `n` keys of one statement, so they share one processed_at: the ties the cursor must walk through. */
  const insert = async (n: number, at: string, eventType: string) => {
    await pool.query(
      `INSERT INTO inbox (task_id, event_type, attempt, event_id, source, processed_at)
       SELECT 't' || lpad(i::text, 6, '0'), $2, 1 + i % 3, 'e' || i, 'test/0@' || i, ${at} FROM generate_series(1, $1) AS i`,
      [n, eventType],
    );
  };
  const read = async (windowMs: number, limit: number, pageSize: number) => {
    const pages: (readonly DedupKey[])[] = [];
    for await (const page of inboxReader(pool).recentKeys(windowMs, limit, pageSize)) pages.push(page);
    return { sizes: pages.map((p) => p.length), keys: pages.flat().map(formatKey) };
  };

  beforeAll(async () => {
    const db = await createTestDatabase(infra.pgUrl, uniqueName('inbox_recent'));
    drop = db.drop;
    pool = createTestPool(db.url, 4);
    await pool.query(inboxMigrationSql);
    await insert(2_503, ago(1), 'Newest');
    await insert(40, ago(30), 'Older');
    await insert(25, ago(120), 'OutOfWindow');
  });
  afterAll(async () => {
    await pool.end();
    await drop();
  });

  it('returns every key of the window once, in pages no larger than asked, though thousands share one instant', async () => {
    const { sizes, keys } = await read(3_600_000, 1_000_000, 1_000);
    expect(sizes).toEqual([1_000, 1_000, 543]);
    expect(new Set(keys).size).toBe(2_543);
    expect(keys.filter((k) => k.includes(':OutOfWindow:'))).toEqual([]);
  });

  it('stops at the limit with the newest keys, the older ones left out', async () => {
    const { sizes, keys } = await read(3_600_000, 2_510, 1_000);
    expect(sizes).toEqual([1_000, 1_000, 510]);
    expect(keys.filter((k) => k.includes(':Newest:'))).toHaveLength(2_503);
    expect(keys.filter((k) => k.includes(':Older:'))).toHaveLength(7);
  });

  it('yields no empty page when the window ends exactly at a page boundary, nor when the limit does', async () => {
    expect((await read(3_600_000, 1_000_000, 2_543)).sizes).toEqual([2_543]);
    expect((await read(3 * 3_600_000, 2_568, 856)).sizes).toEqual([856, 856, 856]);
  });
});
