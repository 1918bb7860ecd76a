import { afterAll, describe, expect, inject, it } from 'vitest';
import { dropDatabase, uniqueName, createTestPool } from '@labelflow/testing';
import { ensureDatabase, migrate, type Migration } from './index';

const infra = inject('infra');

describe('database bootstrap', () => {
  const created: string[] = [];
  afterAll(async () => {
    for (const name of created) await dropDatabase(infra.pgUrl, name);
  });

  it('creates a missing database once even when several instances start together', async () => {
    const name = uniqueName('ensure');
    created.push(name);
    await Promise.all(Array.from({ length: 4 }, () => ensureDatabase(`${infra.pgUrl}/${name}`)));
    const pool = createTestPool(`${infra.pgUrl}/${name}`);
    expect((await pool.query('SELECT current_database() AS db')).rows[0].db).toBe(name);
    await pool.end();
  });

  it('applies each migration exactly once across concurrent starts and skips applied ones later', async () => {
    const name = uniqueName('migrate');
    created.push(name);
    await ensureDatabase(`${infra.pgUrl}/${name}`);
    const pool = createTestPool(`${infra.pgUrl}/${name}`, 8);
    const migrations: Migration[] = [
      { version: 1, name: 'counter', sql: 'CREATE TABLE runs (n int); INSERT INTO runs VALUES (1);' },
      { version: 2, name: 'second', sql: 'INSERT INTO runs VALUES (2);' },
    ];
    const applied = await Promise.all(Array.from({ length: 4 }, () => migrate(pool, migrations)));
    expect(applied.flat().sort()).toEqual([1, 2]);
    expect(await migrate(pool, [...migrations, { version: 3, name: 'third', sql: 'INSERT INTO runs VALUES (3);' }])).toEqual([3]);
    expect((await pool.query('SELECT n FROM runs ORDER BY n')).rows.map((r) => r.n)).toEqual([1, 2, 3]);
    await pool.end();
  });

  it('says that it waits when another instance holds the migration lock, and migrates once the lock is free', async () => {
    const name = uniqueName('migratewait');
    created.push(name);
    await ensureDatabase(`${infra.pgUrl}/${name}`);
    const pool = createTestPool(`${infra.pgUrl}/${name}`, 4);
    const holder = await pool.connect();
    try {
      await holder.query('SELECT pg_advisory_lock(72817001)');
      let waited!: () => void;
      const saidSo = new Promise<void>((resolve) => (waited = resolve));
      const migrating = migrate(pool, [{ version: 1, name: 'counter', sql: 'CREATE TABLE runs (n int);' }], { onWait: waited });
      await saidSo;
      expect((await pool.query("SELECT to_regclass('runs') AS t")).rows[0].t).toBeNull();
      await holder.query('SELECT pg_advisory_unlock(72817001)');
      expect(await migrating).toEqual([1]);
    } finally {
      holder.release();
      await pool.end();
    }
  });

  it('rolls back a failing migration entirely and names it in the error', async () => {
    const name = uniqueName('badmigration');
    created.push(name);
    await ensureDatabase(`${infra.pgUrl}/${name}`);
    const pool = createTestPool(`${infra.pgUrl}/${name}`);
    await expect(migrate(pool, [{ version: 1, name: 'broken', sql: 'CREATE TABLE t (n int); SELECT nonsense FROM nowhere;' }])).rejects.toMatchObject({
      code: 'MIGRATION_FAILED',
      message: expect.stringContaining('migration 1 (broken)'),
    });
    expect((await pool.query(`SELECT to_regclass('t') AS t`)).rows[0].t).toBeNull();
    await pool.end();
  });
});
