import pg from 'pg';
import { pgArray, refuseNestedConnections, usePreparedStatements, watchStalledConnections, type BackendState, type PgArrayElement } from '@labelflow/plumbing';
import { ServiceKitError, ServiceKitErrors } from './errors';

export type Pool = pg.Pool;
export type PoolClient = pg.PoolClient;
// The one home of these is @labelflow/plumbing; apps keep importing them from here.
export { isTransientDbError, pgArray, runInOwnTransaction, withTransaction, type Queryable, type TransactionOptions } from '@labelflow/plumbing';
// The JSON guard of request bodies, also for the apps' own parsing (task-svc's import lines).
export { hasJsonStringLongerThan, V8_LENGTH_HASHED_STRING } from '@labelflow/plumbing';

export interface PoolOptions {
  readonly max?: number;
  /** Fail a second connection asked for inside a transaction body (`refuseNestedConnections`). */
  readonly refuseNestedConnections?: boolean;
  /**
   * PostgreSQL ends a session that sits inside a transaction doing nothing for this long
   * (`idle_in_transaction_session_timeout`). A peer frozen mid-transaction (SIGSTOP, a stalled
   * VM, a partition) otherwise holds its row locks forever, and every consumer or request that
   * needs one of those rows waits with it. No transaction of ours waits on anything but the
   * database. Default IDLE_IN_TRANSACTION_TIMEOUT_MS; 0 turns it off.
   */
  readonly idleInTransactionTimeoutMs?: number;
  /**
   * A statement with no answer for this long has its backend looked up over a fresh connection;
   * when the server says the answer is not coming (the backend is idle or gone) or cannot be
   * reached, the connection is closed and its statements fail as transient
   * (`watchStalledConnections`). Without it, a server that vanished without a reset holds the
   * statement for the kernel's TCP retransmission timeout (about 15 minutes). Default
   * DB_STALL_MS; 0 turns it off. Behind a pooler (PgBouncer) it never closes anything: the probe
   * sees that the pid it was told is not its backend's.
   */
  readonly stallMs?: number;
  /** The stall probe's budget, connect included (STALL_PROBE_TIMEOUT_MS); tests shorten it. */
  readonly stallProbeTimeoutMs?: number;
  /** Told of each connection the stall check closed. */
  readonly onStall?: (event: { readonly pid: number | null; readonly state: BackendState; readonly waitedMs: number }) => void;
}

/** The default of `stallMs`. */
export const DB_STALL_MS = 10_000;

/** The default of `idleInTransactionTimeoutMs`. */
export const IDLE_IN_TRANSACTION_TIMEOUT_MS = 60_000;

export function createPool(
  connectionString: string,
  { max = 10, refuseNestedConnections: refuseNested = false, idleInTransactionTimeoutMs = IDLE_IN_TRANSACTION_TIMEOUT_MS, stallMs = DB_STALL_MS, stallProbeTimeoutMs, onStall }: PoolOptions = {},
): pg.Pool {
  // TCP keepalive: a connection whose server vanished without a reset (a crashed host, a failover
  // that moved the address, a NAT that forgot it) is found dead by the kernel instead of hanging
  // forever, which matters most for the sessions that sit idle between queries (LISTEN).
  const pool = new pg.Pool({
    connectionString,
    max,
    connectionTimeoutMillis: 5_000,
    keepAlive: true,
    keepAliveInitialDelayMillis: 10_000,
    ...(idleInTransactionTimeoutMs > 0 ? { idle_in_transaction_session_timeout: idleInTransactionTimeoutMs } : {}),
  });
  // An idle client losing its server must not crash the process: the next query reconnects.
  pool.on('error', () => undefined);
  // Nor may a checked-out one (pg-pool drops its idle listener on checkout, and pg emits 'error'
  // when the socket ends: a restart, a failover, pg_terminate_backend). Its query in flight
  // rejects with the cause, which is what the caller acts on.
  pool.on('connect', (client) => client.on('error', () => undefined));
  // Parse and plan each statement once per connection, not once per call.
  usePreparedStatements(pool);
  if (stallMs > 0) {
    const watch = watchStalledConnections(pool, { connectionString, stallMs, ...(stallProbeTimeoutMs ? { probeTimeoutMs: stallProbeTimeoutMs } : {}), ...(onStall ? { onAbandon: onStall } : {}) });
    const end = pool.end.bind(pool) as (...args: unknown[]) => unknown;
    // Stopped once the end settled, not when it begins: the end waits for checked-out connections,
    // and a stalled one among them is just what the watch frees.
    pool.end = ((...args: unknown[]) => {
      const ended = end(...args);
      if (ended instanceof Promise) return ended.finally(() => watch.stop());
      watch.stop();
      return ended;
    }) as typeof pool.end;
  }
  // A second connection asked for inside a transaction fails at once, not only under load.
  return refuseNested ? refuseNestedConnections(pool) : pool;
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
  // A server that goes away mid-query emits 'error' too: without a listener that would crash the
  // start with a bare stack instead of DATABASE_UNAVAILABLE (the query rejects with the cause).
  client.on('error', () => undefined);
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
export const unnestColumns = (rows: readonly (readonly PgArrayElement[])[]): string[] => (rows[0] ?? []).map((_, c) => pgArray(rows.map((r) => r[c])));
