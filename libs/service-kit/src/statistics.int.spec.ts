import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { createTestDatabase, eventually, uniqueName } from '@labelflow/testing';
import { createPool, type Pool } from './db';
import { analyzeStaleTables, autovacuumRuns, staleTables } from './statistics';

const infra = inject('infra');

describe('keeping table statistics when autovacuum does not', () => {
  let pool: Pool;
  let drop: () => Promise<void>;
  beforeAll(async () => {
    const db = await createTestDatabase(infra.pgUrl, uniqueName('stats'));
    drop = db.drop;
    pool = createPool(db.url, 2);
    // Where the server's autovacuum runs, it must not analyze these tables behind the test's back.
    await pool.query('CREATE TABLE busy (id text PRIMARY KEY, n int NOT NULL) WITH (autovacuum_enabled = false)');
    await pool.query('CREATE TABLE quiet (id text PRIMARY KEY, n int NOT NULL) WITH (autovacuum_enabled = false)');
    // Past autovacuum's default threshold for a table never analyzed (50 rows) and below it.
    await pool.query(`INSERT INTO busy SELECT g::text, g FROM generate_series(1, 200) g`);
    await pool.query(`INSERT INTO quiet SELECT g::text, g FROM generate_series(1, 20) g`);
  });
  afterAll(async () => {
    await pool?.end();
    await drop?.();
  });

  it('names a table once more rows changed than 50 plus a tenth of what it held at its last ANALYZE, and not a table below that', async () => {
    // Each backend reports its row counts to the statistics views within a second or so.
    await eventually(async () => expect(await staleTables(pool)).toEqual([{ table: 'public.busy', changedRows: 200 }]));

    await pool.query('ANALYZE busy');
    await pool.query(`UPDATE busy SET n = n + 1 WHERE n <= 60`);
    // 60 changed rows against 50 + 20 after an ANALYZE that counted 200: not stale yet.
    await eventually(async () => {
      const [row] = (await pool.query<{ changed: string }>(`SELECT n_mod_since_analyze AS changed FROM pg_stat_user_tables WHERE relname = 'busy'`)).rows;
      expect(Number(row?.changed)).toBe(60);
    });
    expect(await staleTables(pool)).toEqual([]);
    await pool.query(`UPDATE busy SET n = n + 1 WHERE n > 185`);
    await eventually(async () => expect(await staleTables(pool)).toEqual([{ table: 'public.busy', changedRows: 75 }]));
  });

  it('analyzes the stale tables while the server’s autovacuum is off, and leaves them to the server while it is on', async () => {
    await eventually(async () => expect((await staleTables(pool)).map((t) => t.table)).toEqual(['public.busy']));
    const analyzed = await analyzeStaleTables(pool);
    if (await autovacuumRuns(pool)) {
      expect(analyzed).toEqual([]);
      return;
    }
    expect(analyzed.map((t) => t.table)).toEqual(['public.busy']);
    const [busy] = (await pool.query<{ reltuples: number }>(`SELECT reltuples FROM pg_class WHERE relname = 'busy'`)).rows;
    expect(busy?.reltuples).toBe(200);
    await eventually(async () => expect(await staleTables(pool)).toEqual([]));
  });
});
