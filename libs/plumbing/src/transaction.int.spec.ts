import pg from 'pg';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { createTestPool, freshDatabase } from '@labelflow/testing';
import { PlumbingErrors } from './errors';
import { isTransientDbError } from './transient';
import { refuseNestedConnections, runInOwnTransaction, withTransaction } from './transaction';

const infra = inject('infra');

/** A fresh database with an `items` table for one describe block, its pool refusing nested connections; `url` for a test's own clients. */
function itemsDatabase(name: string, poolSize: number) {
  const db = {
    url: '',
    pool: undefined as unknown as pg.Pool,
    ids: async () => (await db.pool.query<{ id: string }>('SELECT id FROM items ORDER BY id')).rows.map((r) => r.id),
  };
  const fresh = freshDatabase(infra.pgUrl, name, (pool) => pool.query('CREATE TABLE items (id text PRIMARY KEY)'), {
    pool: (url) => {
      db.url = url;
      return refuseNestedConnections(createTestPool(url, poolSize));
    },
  });
  beforeAll(async () => {
    db.pool = await fresh.open();
  });
  afterAll(() => fresh.close());
  return db;
}

describe('withTransaction on a real PostgreSQL', () => {
  const db = itemsDatabase('tx', 3);
  const insert = (id: string) => (tx: pg.PoolClient) => tx.query('INSERT INTO items (id) VALUES ($1)', [id]);

  it('commits what the body wrote and returns what it returned', async () => {
    const answer = await withTransaction(db.pool, async (tx) => (await insert('a')(tx), 'done'));
    expect(answer).toBe('done');
    expect(await db.ids()).toContain('a');
  });

  it('rolls back everything when the body throws, and rethrows the error', async () => {
    const boom = new Error('boom');
    await expect(withTransaction(db.pool, async (tx) => (await insert('b')(tx), Promise.reject(boom)))).rejects.toBe(boom);
    expect(await db.ids()).not.toContain('b');
  });

  it('fails when a statement failed inside a body that caught it, since COMMIT then only rolls back', async () => {
    const swallowing = async (tx: pg.PoolClient) => {
      await insert('s1')(tx);
      await insert('s1')(tx).catch(() => undefined); // a duplicate key: the transaction is now aborted
      return 'looked fine';
    };
    await expect(withTransaction(db.pool, swallowing)).rejects.toMatchObject({ code: PlumbingErrors.TRANSACTION_ROLLED_BACK });
    expect(await db.ids()).not.toContain('s1');
    expect(await withTransaction(db.pool, async (tx) => (await insert('s2')(tx), 'next caller fine'))).toBe('next caller fine');
  });

  it('rolls back without throwing when commitIf says no, and still returns the result', async () => {
    const result = await withTransaction(db.pool, async (tx) => (await insert('c')(tx), { status: 503 }), { commitIf: (r) => r.status < 500 });
    expect(result).toEqual({ status: 503 });
    expect(await db.ids()).not.toContain('c');
  });

  it('reads one snapshot across its statements with snapshot, so a commit between them is not seen, and refuses writes', async () => {
    await db.pool.query("INSERT INTO items (id) VALUES ('snap-1')");
    const other = new pg.Client({ connectionString: db.url });
    await other.connect();
    try {
      const counts = await withTransaction(
        db.pool,
        async (tx) => {
          const count = async () => Number((await tx.query<{ n: string }>("SELECT count(*) AS n FROM items WHERE id LIKE 'snap-%'")).rows[0]?.n);
          const before = await count();
          await other.query("INSERT INTO items (id) VALUES ('snap-2')");
          return [before, await count()];
        },
        { snapshot: true },
      );
      expect(counts).toEqual([1, 1]);
      expect(await db.ids()).toContain('snap-2');
      await expect(withTransaction(db.pool, insert('snap-3'), { snapshot: true })).rejects.toMatchObject({ code: '25006' });
      expect(await db.ids()).not.toContain('snap-3');
    } finally {
      await other.end();
    }
  });

  it('bounds a lock wait inside the transaction by lockTimeoutMs, and only inside it', async () => {
    const holder = new pg.Client({ connectionString: db.url });
    await holder.connect();
    try {
      await holder.query("BEGIN; INSERT INTO items (id) VALUES ('held')");
      const started = Date.now();
      const failed = await withTransaction(db.pool, insert('held'), { lockTimeoutMs: 100 }).then(
        () => undefined,
        (error: unknown) => error,
      );
      expect(failed).toMatchObject({ code: '55P03' });
      expect(Date.now() - started).toBeLessThan(5_000);
      // SET LOCAL ends with the transaction: the next one on the same db.pool waits as long as it must.
      const waiting = withTransaction(db.pool, async (tx) => (await tx.query<{ timeout: string }>("SELECT current_setting('lock_timeout') AS timeout")).rows[0]?.timeout);
      await expect(waiting).resolves.toBe('0');
      await holder.query('ROLLBACK');
    } finally {
      await holder.end();
    }
  });

  it('refuses a lock timeout that is not a positive integer before touching the db.pool', async () => {
    await expect(withTransaction(db.pool, async () => 1, { lockTimeoutMs: 0 })).rejects.toMatchObject({ code: PlumbingErrors.CONFIG_INVALID });
  });

  it('refuses a second db.pool connection from inside the body, so db.pool starvation shows in every test', async () => {
    await expect(withTransaction(db.pool, async () => db.pool.query('SELECT 1'))).rejects.toMatchObject({ code: PlumbingErrors.NESTED_CONNECTION });
    expect((await db.pool.query<{ one: number }>('SELECT 1 AS one')).rows[0]?.one).toBe(1);
  });

  it('keeps a connection that failed on a lock but discards one the database dropped, and the db.pool serves again', async () => {
    const holder = new pg.Client({ connectionString: db.url });
    await holder.connect();
    const admin = new pg.Client({ connectionString: db.url });
    await admin.connect();
    try {
      const pidOf = async (tx: pg.PoolClient) => (await tx.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]!.pid;
      await withTransaction(db.pool, pidOf);
      const total = db.pool.totalCount;
      await holder.query("BEGIN; INSERT INTO items (id) VALUES ('kept')");
      await expect(withTransaction(db.pool, insert('kept'), { lockTimeoutMs: 50 })).rejects.toMatchObject({ code: '55P03' });
      await holder.query('ROLLBACK');
      // A statement that failed leaves a healthy connection: it rolled back and went back to the db.pool.
      expect(db.pool.totalCount).toBe(total);

      const dropped = await withTransaction(db.pool, async (tx) => {
        // Listening before the kill: the socket may end before the admin's answer arrives.
        const ended = new Promise<void>((resolve) => tx.once('end', () => resolve()));
        await admin.query('SELECT pg_terminate_backend($1)', [await pidOf(tx)]);
        await ended;
        return tx.query('SELECT 1');
      }).then(
        () => undefined,
        (error: unknown) => error,
      );
      expect(isTransientDbError(dropped)).toBe(true);
      expect(db.pool.totalCount).toBe(total - 1);
      expect((await db.pool.query<{ three: number }>('SELECT 3 AS three')).rows[0]?.three).toBe(3);
    } finally {
      await holder.end();
      await admin.end();
    }
  });
});

describe('runInOwnTransaction on a real PostgreSQL', () => {
  const db = itemsDatabase('tx1', 1);

  it('runs the statement inside its transaction, under the lock timeout, commits it, and answers its rows', async () => {
    const result = await runInOwnTransaction<{ id: string; timeout: string }>(db.pool, "INSERT INTO items (id) VALUES ($1), ($2) RETURNING id, current_setting('lock_timeout') AS timeout", ['a', 'b'], {
      lockTimeoutMs: 1_000,
    });
    expect(result.rows).toEqual([
      { id: 'a', timeout: '1s' },
      { id: 'b', timeout: '1s' },
    ]);
    expect(await db.ids()).toEqual(['a', 'b']);
  });

  it('writes nothing when the statement fails, rethrows its error, and leaves the connection ready for the next caller', async () => {
    const failed = await runInOwnTransaction(db.pool, "INSERT INTO items (id) VALUES ('c'), ('a')", []).then(
      () => undefined,
      (error: unknown) => error,
    );
    expect(failed).toMatchObject({ code: '23505' });
    expect(await db.ids()).toEqual(['a', 'b']);
    // The db.pool has one connection: this runs on the one that failed, outside any transaction.
    const state = await db.pool.query<{ timeout: string; open: boolean }>("SELECT current_setting('lock_timeout') AS timeout, now() <> statement_timestamp() AS open");
    expect(state.rows[0]).toEqual({ timeout: '0', open: false });
  });

  it('bounds the statement\'s lock waits by lockTimeoutMs, as SET LOCAL inside its transaction', async () => {
    const holder = new pg.Client({ connectionString: db.url });
    await holder.connect();
    try {
      await holder.query("BEGIN; INSERT INTO items (id) VALUES ('held')");
      const failed = await runInOwnTransaction(db.pool, "INSERT INTO items (id) VALUES ('held')", [], { lockTimeoutMs: 100 }).then(
        () => undefined,
        (error: unknown) => error,
      );
      expect(failed).toMatchObject({ code: '55P03' });
      expect(isTransientDbError(failed)).toBe(true);
      await holder.query('ROLLBACK');
    } finally {
      await holder.end();
    }
    expect(await db.ids()).toEqual(['a', 'b']);
  });

  it('refuses a lock timeout that is not a positive integer before touching the db.pool', async () => {
    await expect(runInOwnTransaction(db.pool, 'SELECT 1', [], { lockTimeoutMs: 1.5 })).rejects.toMatchObject({ code: PlumbingErrors.CONFIG_INVALID });
  });
});
