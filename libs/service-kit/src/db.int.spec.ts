import pg from 'pg';
import { afterAll, afterEach, beforeAll, describe, expect, inject, it, vi } from 'vitest';
import { PlumbingErrors, type BackendState } from '@labelflow/plumbing';
import { createTestDatabase, startTcpProxy, uniqueName, type TcpProxy } from '@labelflow/testing';
import { createPool, isTransientDbError, withTransaction, type Pool } from './db';

const infra = inject('infra');

describe('the service pool', () => {
  let pool: Pool;
  let poolUrl: string;
  let drop: () => Promise<void>;
  beforeAll(async () => {
    const db = await createTestDatabase(infra.pgUrl, uniqueName('pool'));
    drop = db.drop;
    poolUrl = db.url;
    pool = createPool(db.url, { max: 2, refuseNestedConnections: true });
  });
  afterAll(async () => {
    await pool.end();
    await drop();
  });

  it('refuses a second connection inside a transaction, so pool starvation shows in every test and not only under load', async () => {
    await expect(withTransaction(pool, async () => pool.query('SELECT 1'))).rejects.toThrow(/inside a transaction/);
    await expect(withTransaction(pool, async (tx) => (await tx.query<{ one: number }>('SELECT 1 AS one')).rows[0]?.one)).resolves.toBe(1);
  });

  it('survives the database dropping the connection of an open transaction: the transaction fails as transient and the pool serves again', async () => {
    const admin = new pg.Client({ connectionString: poolUrl });
    await admin.connect();
    try {
      const failed = await withTransaction(pool, async (tx) => {
        const pid = (await tx.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]!.pid;
        // Listening before the kill: the socket may end before the admin's answer arrives.
        const ended = new Promise<void>((resolve) => tx.once('end', () => resolve()));
        await admin.query('SELECT pg_terminate_backend($1)', [pid]);
        // pg emits 'error' on this checked-out client as its socket ends; unheard, it kills the process.
        await ended;
        return tx.query('SELECT 1');
      }).then(
        () => undefined,
        (error: unknown) => error,
      );
      expect(isTransientDbError(failed)).toBe(true);
      expect((await pool.query<{ three: number }>('SELECT 3 AS three')).rows[0]?.three).toBe(3);
    } finally {
      await admin.end();
    }
  });

  it('has PostgreSQL end a session left idle inside a transaction, so a frozen holder releases its locks and the waiter goes on', async () => {
    const short = createPool(poolUrl, { max: 2, idleInTransactionTimeoutMs: 300 });
    try {
      await short.query('CREATE TABLE IF NOT EXISTS frozen_locks (id int PRIMARY KEY, n int NOT NULL)');
      await short.query('INSERT INTO frozen_locks VALUES (1, 0) ON CONFLICT DO NOTHING');
      // The "frozen" holder: it locks the row, then never speaks again.
      const holder = await short.connect();
      const holderGone = new Promise<void>((resolve) => holder.once('error', () => resolve()));
      await holder.query('BEGIN');
      await holder.query('UPDATE frozen_locks SET n = n + 1 WHERE id = 1');
      // The waiter needs the same row: it is served once the server has ended the idle holder.
      const updated = await withTransaction(pool, (tx) => tx.query('UPDATE frozen_locks SET n = n + 10 WHERE id = 1'));
      expect(updated.rowCount).toBe(1);
      await holderGone;
      holder.release(true);
      expect((await pool.query<{ n: number }>('SELECT n FROM frozen_locks WHERE id = 1')).rows[0]?.n).toBe(10);
    } finally {
      await short.end();
    }
  });

  it('still serves queries outside transactions, also right after one ended', async () => {
    await withTransaction(pool, async (tx) => tx.query('SELECT 1'));
    expect((await pool.query<{ two: number }>('SELECT 2 AS two')).rows[0]?.two).toBe(2);
  });
});

describe('a statement whose answer is not coming', () => {
  let proxy: TcpProxy;
  let dbUrl: string;
  let proxied: string;
  let drop: () => Promise<void>;
  let pool: Pool | undefined;
  const stalls: { readonly pid: number | null; readonly state: BackendState; readonly waitedMs: number }[] = [];
  beforeAll(async () => {
    const db = await createTestDatabase(infra.pgUrl, uniqueName('stall'));
    drop = db.drop;
    dbUrl = db.url;
  });
  afterAll(async () => drop());
  // A probe gets seconds, as in production: a slow one on a busy test machine must not read as a black hole.
  const open = async (url: string, stallMs: number, stallProbeTimeoutMs = 3_000) => {
    stalls.length = 0;
    pool = createPool(url, { max: 1, stallMs, stallProbeTimeoutMs, onStall: (stall) => stalls.push(stall) });
    return pool;
  };
  const viaProxy = async () => {
    const server = new URL(dbUrl);
    proxy = await startTcpProxy({ host: server.hostname, port: Number(server.port || 5432) });
    const url = new URL(dbUrl);
    url.hostname = '127.0.0.1';
    url.port = String(proxy.port);
    proxied = url.toString();
  };
  // pg sets it from the server's BackendKeyData; its typings leave it out.
  const pidOf = (client: pg.PoolClient) => (client as pg.PoolClient & { processID: number }).processID;
  const failureOf = (work: Promise<unknown>) =>
    work.then(
      () => {
        throw new Error('the statement was expected to fail');
      },
      (error: unknown) => error,
    );
  afterEach(async () => {
    // The proxy first: a statement a failed test left hanging on it would hold the pool's end.
    await proxy?.close();
    await pool?.end();
    pool = undefined;
  });

  it('fails as transient and the pool serves again once the server is out of reach without a reset, instead of waiting for the kernel for minutes', async () => {
    await viaProxy();
    const p = await open(proxied, 300, 500);
    expect((await p.query<{ one: number }>('SELECT 1 AS one')).rows[0]?.one).toBe(1);
    proxy.silence('all');
    const failed = await failureOf(p.query('SELECT 2'));
    expect(failed).toMatchObject({ code: PlumbingErrors.CONNECTION_STALLED });
    expect(isTransientDbError(failed)).toBe(true);
    expect(stalls).toEqual([expect.objectContaining({ state: 'unreachable' })]);
    proxy.restore();
    expect((await p.query<{ three: number }>('SELECT 3 AS three')).rows[0]?.three).toBe(3);
  });

  it('closes the connection when the server finished the statement but its answer was lost on the way, and ends the session so it holds no locks', async () => {
    await viaProxy();
    const p = await open(proxied, 300);
    const client = await p.connect();
    const pid = pidOf(client);
    try {
      await client.query('CREATE TABLE IF NOT EXISTS lost_answers (id int PRIMARY KEY)');
      await client.query('BEGIN');
      proxy.silence('open', 'answers');
      // The insert arrives and runs; its answer does not. The probe's own connection gets through,
      // and the server says the backend is idle in its transaction, holding the row.
      const failed = await failureOf(client.query('INSERT INTO lost_answers VALUES (1)'));
      expect(failed).toMatchObject({ code: PlumbingErrors.CONNECTION_STALLED });
      expect(stalls).toEqual([expect.objectContaining({ state: 'answered', pid })]);
    } finally {
      client.release(true);
    }
    // Ended by the watch, not by the server's idle timeout a minute later: the row is free at once.
    const admin = new pg.Client({ connectionString: dbUrl });
    await admin.connect();
    try {
      await vi.waitFor(async () => expect((await admin.query('SELECT 1 FROM pg_stat_activity WHERE pid = $1', [pid])).rowCount).toBe(0));
      await admin.query("SET lock_timeout = '2s'");
      await admin.query('INSERT INTO lost_answers VALUES (1)');
      await admin.query('DELETE FROM lost_answers');
    } finally {
      await admin.end();
    }
    expect((await p.query<{ four: number }>('SELECT 4 AS four')).rows[0]?.four).toBe(4);
  });

  it('closes the connection when its backend is gone and the news of it was lost', async () => {
    await viaProxy();
    const p = await open(proxied, 300);
    const client = await p.connect();
    try {
      const pid = pidOf(client);
      const pending = failureOf(client.query('SELECT pg_sleep(30)'));
      // Ended from outside once its connection went silent: the client never hears of it.
      const admin = new pg.Client({ connectionString: dbUrl });
      await admin.connect();
      try {
        await vi.waitFor(async () => expect((await admin.query('SELECT 1 FROM pg_stat_activity WHERE pid = $1 AND state = $2', [pid, 'active'])).rowCount).toBe(1));
        proxy.silence('open');
        await admin.query('SELECT pg_terminate_backend($1)', [pid]);
      } finally {
        await admin.end();
      }
      expect(await pending).toMatchObject({ code: PlumbingErrors.CONNECTION_STALLED });
      expect(stalls).toEqual([expect.objectContaining({ state: 'gone' })]);
    } finally {
      client.release(true);
    }
  });

  it('lets a statement that runs longer than the stall bound finish, because the server says its backend is still working', async () => {
    const p = await open(dbUrl, 100);
    expect((await p.query<{ done: string }>("SELECT pg_sleep(1), 'done' AS done")).rows[0]?.done).toBe('done');
    expect(stalls).toEqual([]);
  });
});

describe('isTransientDbError on errors from real servers', () => {
  const errorOf = async (url: string, sql: string) => {
    const pool = createPool(url, { max: 1, refuseNestedConnections: true });
    // The sentinel is thrown outside the catch: a query that succeeds must fail the test, not be
    // returned as if it were the error under test.
    const outcome = await pool.query(sql).then(
      () => ({ failed: false as const }),
      (error: unknown) => ({ failed: true as const, error }),
    );
    await pool.end();
    if (!outcome.failed) throw new Error(`the query was expected to fail: ${sql}`);
    return outcome.error;
  };

  it('counts an unresolvable or refusing database host as transient, so consumers wait instead of dead-lettering', async () => {
    expect(isTransientDbError(await errorOf('postgres://postgres@db-host-that-does-not-resolve.invalid:5432/x', 'SELECT 1'))).toBe(true);
    expect(isTransientDbError(await errorOf('postgres://postgres@127.0.0.1:1/x', 'SELECT 1'))).toBe(true);
  });

  it('counts a statement the server cancelled (statement_timeout) and a write refused by a read-only server as transient, so a consumer waits instead of dead-lettering good events', async () => {
    const url = `${infra.pgUrl}/postgres`;
    const cancelled = await errorOf(url, "SET statement_timeout = 20; SELECT pg_sleep(2)");
    expect(cancelled).toMatchObject({ code: '57014' });
    expect(isTransientDbError(cancelled)).toBe(true);
    // What a write meets on a primary just turned standby; a read-only transaction is its stand-in.
    const readOnly = await errorOf(url, 'BEGIN READ ONLY; CREATE TABLE never_written (id int); COMMIT');
    expect(readOnly).toMatchObject({ code: '25006' });
    expect(isTransientDbError(readOnly)).toBe(true);
  });

  it('counts an error of the statement itself as permanent', async () => {
    const url = `${infra.pgUrl}/postgres`;
    expect(isTransientDbError(await errorOf(url, 'SELECT 1/0'))).toBe(false);
    expect(isTransientDbError(await errorOf(url, 'SELECT * FROM no_such_table'))).toBe(false);
  });
});
