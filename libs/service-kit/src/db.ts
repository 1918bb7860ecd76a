import { AsyncLocalStorage } from 'node:async_hooks';
import pg from 'pg';
import { ServiceKitError, ServiceKitErrors } from './errors';

export type Pool = pg.Pool;
export type PoolClient = pg.PoolClient;
/** What repositories take: a pool or a client inside a transaction. */
export type Queryable = Pick<pg.PoolClient, 'query'>;

/** Set while a transaction runs: the code inside must use its client, never the pool. */
const inTransaction = new AsyncLocalStorage<true>();

/**
 * Runs `fn` as the body of a transaction. Asking the pool for a connection from inside it fails at
 * once: a request that holds one connection while waiting for a second starves the pool as soon
 * as enough of them run together, which no test sees until the load is high.
 */
export const asTransactionBody = <T>(fn: () => Promise<T>): Promise<T> => inTransaction.run(true, fn);

export function createPool(connectionString: string, max = 10): pg.Pool {
  const pool = new pg.Pool({ connectionString, max, connectionTimeoutMillis: 5_000 });
  // An idle client losing its server must not crash the process: the next query reconnects.
  pool.on('error', () => undefined);
  // Nor may a checked-out one (pg-pool drops its idle listener on checkout, and pg emits 'error'
  // when the socket ends: a restart, a failover, pg_terminate_backend). Its query in flight
  // rejects with the cause, which is what the caller acts on.
  pool.on('connect', (client) => client.on('error', () => undefined));
  const connect = pool.connect.bind(pool) as () => Promise<pg.PoolClient>;
  pool.connect = ((...args: unknown[]) => {
    if (inTransaction.getStore()) {
      const error = new Error('a second pool connection was requested inside a transaction: use the transaction client');
      if (typeof args[0] === 'function') return void (args[0] as (e: Error) => void)(error);
      return Promise.reject(error);
    }
    return (connect as (...a: unknown[]) => unknown)(...args);
  }) as typeof pool.connect;
  return pool;
}

/** Creates the database named in `url` when it does not exist yet (one database per service). */
export async function ensureDatabase(url: string): Promise<void> {
  const target = new URL(url);
  const name = decodeURIComponent(target.pathname.replace(/^\//, ''));
  if (!/^[A-Za-z0-9_]{1,63}$/.test(name)) {
    throw new ServiceKitError(ServiceKitErrors.CONFIG_INVALID, `database name "${name}" must be 1-63 letters, digits or underscores`);
  }
  const admin = new URL(url);
  admin.pathname = '/postgres';
  const client = new pg.Client({ connectionString: admin.toString(), connectionTimeoutMillis: 5_000 });
  try {
    await client.connect();
    const found = await client.query('SELECT 1 FROM pg_database WHERE datname = $1', [name]);
    if (found.rowCount === 0) await client.query(`CREATE DATABASE "${name}"`);
  } catch (error) {
    // Two instances starting together race to create it; losing that race is fine.
    const code = (error as { code?: string }).code;
    if (code !== '42P04' && code !== '23505') {
      throw new ServiceKitError(ServiceKitErrors.DATABASE_UNAVAILABLE, `cannot ensure database ${name}: ${(error as Error).message}`, { cause: error, retriable: true });
    }
  } finally {
    await client.end().catch(() => undefined);
  }
}

/**
 * Rows to the column arrays a multi-row statement takes through `unnest($1::t[], $2::t[], ...)`:
 * one statement and one round trip for any number of rows.
 */
export const unnestColumns = (rows: readonly (readonly unknown[])[]): unknown[][] => (rows[0] ?? []).map((_, c) => rows.map((r) => r[c]));

/** Runs `fn` in one transaction; rolls back on any throw and rethrows. */
export async function withTransaction<T>(pool: pg.Pool, fn: (tx: pg.PoolClient) => Promise<T>): Promise<T> {
  const client = await pool.connect();
  let failure: unknown;
  try {
    await client.query('BEGIN');
    const result = await asTransactionBody(() => fn(client));
    await client.query('COMMIT');
    return result;
  } catch (error) {
    await client.query('ROLLBACK').catch(() => undefined);
    failure = error;
    throw error;
  } finally {
    // A client whose connection broke is discarded, not handed to the next caller.
    client.release(failure !== undefined && isTransientDbError(failure) ? (failure as Error) : undefined);
  }
}

/**
 * SQLSTATEs where the database, not the statement, is the problem: the same work succeeds once it
 * recovers. Classes 08 (connection), 53 (insufficient resources: disk full, out of memory, too
 * many connections) and 58 (system I/O), plus serialization failures, deadlocks, a lock timeout and
 * operator intervention.
 */
const TRANSIENT_SQLSTATE = /^(08|53|58)...$|^(40001|40P01|55P03|57P01|57P02|57P03|57P05)$/;
/** Node's network errors, by code: a database host that is restarting or briefly unresolvable (a compose service being recreated) is not a bad message. */
const TRANSIENT_NET_CODES = new Set(['ECONNREFUSED', 'ECONNRESET', 'ETIMEDOUT', 'EPIPE', 'ENOTFOUND', 'EAI_AGAIN', 'EHOSTUNREACH', 'ENETUNREACH', 'ECONNABORTED']);

/**
 * True for errors where the same statement may succeed later. Consumers retry these without limit
 * instead of dead-lettering: an outage of the database must never cost a good event.
 */
export function isTransientDbError(error: unknown): boolean {
  if (typeof error !== 'object' || error === null) return false;
  const { code, message } = error as { code?: unknown; message?: unknown };
  if (typeof code === 'string' && (TRANSIENT_SQLSTATE.test(code) || TRANSIENT_NET_CODES.has(code))) return true;
  if (typeof message !== 'string') return false;
  return /ECONNREFUSED|ECONNRESET|ETIMEDOUT|EPIPE|ENOTFOUND|EAI_AGAIN|EHOSTUNREACH|ENETUNREACH|Connection terminated|timeout exceeded when trying to connect|Client has encountered a connection error/i.test(message);
}
