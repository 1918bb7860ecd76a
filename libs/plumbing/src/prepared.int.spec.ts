import pg from 'pg';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { createTestDatabase, uniqueName } from '@labelflow/testing';
import { usePreparedStatements } from './prepared';
import { withTransaction } from './transaction';
import { isTransientDbError } from './transient';

const infra = inject('infra');

describe('usePreparedStatements on a real PostgreSQL', () => {
  let pool: pg.Pool;
  let url: string;
  let drop: () => Promise<void>;
  beforeAll(async () => {
    const db = await createTestDatabase(infra.pgUrl, uniqueName('prep'));
    drop = db.drop;
    url = db.url;
    pool = usePreparedStatements(new pg.Pool({ connectionString: db.url, max: 2 }), { maxStatements: 2 });
    await pool.query('CREATE TABLE items (id text PRIMARY KEY, n int NOT NULL)');
  });
  afterAll(async () => {
    await pool?.end();
    await drop?.();
  });

  /** The statements this connection holds prepared on the server, by their text. */
  const prepared = async (client: pg.PoolClient) => (await client.query<{ statement: string }>('SELECT statement FROM pg_prepared_statements ORDER BY prepare_time')).rows.map((r) => r.statement);

  it('prepares a parameterised statement once per connection and runs it again by name with new values', async () => {
    // A connection of its own, so that what it holds prepared is this test's alone.
    const own = usePreparedStatements(new pg.Pool({ connectionString: url, max: 1 }), { maxStatements: 2 });
    const client = await own.connect();
    try {
      await client.query('INSERT INTO items (id, n) VALUES ($1, $2)', ['a', 1]);
      await client.query('INSERT INTO items (id, n) VALUES ($1, $2)', ['b', 2]);
      expect(await prepared(client)).toEqual(['INSERT INTO items (id, n) VALUES ($1, $2)']);
      expect((await client.query('SELECT id FROM items WHERE n BETWEEN $1 AND 2 ORDER BY id', [1])).rows).toEqual([{ id: 'a' }, { id: 'b' }]);
    } finally {
      client.release();
      await own.end();
    }
  });

  it('leaves queries without values on the simple protocol, so several statements still run in one text', async () => {
    const client = await pool.connect();
    try {
      await client.query('BEGIN; SET LOCAL lock_timeout = 1000');
      await client.query('ROLLBACK');
      expect(await prepared(client)).not.toContain('BEGIN; SET LOCAL lock_timeout = 1000');
    } finally {
      client.release();
    }
  });

  it('runs texts past its limit unnamed, with the same results', async () => {
    // A pool of its own, one connection: two texts reach the limit, a third runs as before, unprepared.
    const own = usePreparedStatements(new pg.Pool({ connectionString: url, max: 1 }), { maxStatements: 2 });
    try {
      await own.query('INSERT INTO items (id, n) VALUES ($1, $2) ON CONFLICT (id) DO NOTHING', ['limit-1', 40]);
      await own.query('SELECT n FROM items WHERE id = $1', ['limit-1']);
      const text = 'SELECT count(*)::int AS n FROM items WHERE n = $1';
      expect((await own.query(text, [40])).rows).toEqual([{ n: 1 }]);
      const client = await own.connect();
      try {
        const named = await prepared(client);
        expect(named).toHaveLength(2);
        expect(named).not.toContain(text);
      } finally {
        client.release();
      }
    } finally {
      await own.end();
    }
  });

  it('serves a named statement to pool.query with a callback as well as with a promise', async () => {
    await pool.query('INSERT INTO items (id, n) VALUES ($1, $2) ON CONFLICT (id) DO NOTHING', ['callback-1', 50]);
    const rows = await new Promise<unknown[]>((resolve, reject) => pool.query('SELECT id FROM items WHERE n >= $1 ORDER BY id', [50], (error, result) => (error ? reject(error) : resolve(result.rows))));
    expect(rows).toEqual([{ id: 'callback-1' }]);
    expect((await pool.query('SELECT id FROM items WHERE n >= $1 ORDER BY id', [50])).rows).toEqual([{ id: 'callback-1' }]);
  });
  it('closes a connection whose prepared statement another instance\'s migration outdated, so the retry prepares it again and sees the new column', async () => {
    // One connection, so that the retry can only succeed on a fresh one.
    const own = usePreparedStatements(new pg.Pool({ connectionString: url, max: 1 }));
    const migrator = new pg.Client({ connectionString: url });
    await migrator.connect();
    try {
      const table = uniqueName('wide').replace(/[^a-z0-9_]/gi, '_');
      await migrator.query(`CREATE TABLE ${table} (id text PRIMARY KEY, n int NOT NULL)`);
      await migrator.query(`INSERT INTO ${table} VALUES ('a', 1)`);
      const load = (client: pg.ClientBase) => client.query(`SELECT * FROM ${table} WHERE id = ANY($1::text[]) FOR UPDATE`, [['a']]);
      expect((await withTransaction(own, load)).rows).toEqual([{ id: 'a', n: 1 }]);
      expect((await own.query(`SELECT * FROM ${table} WHERE id = $1`, ['a'])).rows).toEqual([{ id: 'a', n: 1 }]);

      await migrator.query(`ALTER TABLE ${table} ADD COLUMN note text NOT NULL DEFAULT 'new'`);
      // In a transaction: the failure is transient, and the retry runs on a new connection.
      const failed = await withTransaction(own, load).catch((error: unknown) => error);
      expect((failed as { code?: string }).code).toBe('0A000');
      expect(isTransientDbError(failed)).toBe(true);
      expect((await withTransaction(own, load)).rows).toEqual([{ id: 'a', n: 1, note: 'new' }]);
      // pool.query (its own checkout and release) recovers the same way.
      expect((await own.query(`SELECT * FROM ${table} WHERE id = $1`, ['a'])).rows).toEqual([{ id: 'a', n: 1, note: 'new' }]);
      await migrator.query(`ALTER TABLE ${table} ADD COLUMN flag boolean NOT NULL DEFAULT true`);
      const once = await own.query(`SELECT * FROM ${table} WHERE id = $1`, ['a']).catch((error: unknown) => error);
      expect(isTransientDbError(once)).toBe(true);
      expect((await own.query(`SELECT * FROM ${table} WHERE id = $1`, ['a'])).rows).toEqual([{ id: 'a', n: 1, note: 'new', flag: true }]);
      expect((await withTransaction(own, load)).rows).toEqual([{ id: 'a', n: 1, note: 'new', flag: true }]);
    } finally {
      await migrator.end();
      await own.end();
    }
  });
});
