import { AsyncLocalStorage } from 'node:async_hooks';
import type pg from 'pg';
import { withChildSpan, type TraceSpan } from '@labelflow/telemetry';
import { PlumbingError, PlumbingErrors, requirePositiveInteger } from './errors';

/**
 * Set while a transaction body runs: the code inside must use its client, never the pool.
 *
 * Created on first use, not at import: on Node 20, once any AsyncLocalStorage has run, every
 * promise the process creates pays V8's promise hook (a bare `await` costs 2.5 times as much; an
 * HTTP command of task-svc about 7 % more CPU). So only a process that asked for the guard
 * (`refuseNestedConnections`) ever creates it.
 */
let inTransaction: AsyncLocalStorage<true> | undefined;

/**
 * Runs `fn` as the body of a transaction. On a pool passed through `refuseNestedConnections`,
 * asking for a connection from inside it fails at once: a request that holds one connection while
 * waiting for a second starves the pool as soon as enough of them run together, which no test sees
 * until the load is high.
 */
export const asTransactionBody = <T>(fn: () => Promise<T>): Promise<T> => (inTransaction ??= new AsyncLocalStorage<true>()).run(true, fn);

/** Pools passed through `refuseNestedConnections`: only their transactions run as marked bodies. */
const GUARDED = Symbol.for('labelflow.plumbing.refuses-nested-connections');
const isGuarded = (pool: pg.Pool): boolean => (pool as pg.Pool & { [GUARDED]?: true })[GUARDED] === true;

/**
 * Makes `pool.connect` (and so `pool.query`) fail with NESTED_CONNECTION when called inside a
 * transaction body, with a promise or a callback as the caller used it. Returns the same pool.
 * The check costs every promise of the process some CPU on Node 20 (see `inTransaction`): the
 * services turn it on in tests (`DB_REFUSE_NESTED_CONNECTIONS`), where it finds the mistake.
 */
export function refuseNestedConnections(pool: pg.Pool): pg.Pool {
  (pool as pg.Pool & { [GUARDED]?: true })[GUARDED] = true;
  const connect = pool.connect.bind(pool) as () => Promise<pg.PoolClient>;
  pool.connect = ((...args: unknown[]) => {
    if (inTransaction?.getStore()) {
      const error = new PlumbingError(PlumbingErrors.NESTED_CONNECTION, 'a second pool connection was requested inside a transaction: use the transaction client');
      if (typeof args[0] === 'function') return void (args[0] as (e: Error) => void)(error);
      return Promise.reject(error);
    }
    return (connect as (...a: unknown[]) => unknown)(...args);
  }) as typeof pool.connect;
  return pool;
}

/** Marks a client that already has its error listener, whoever added it. */
const LISTENED = Symbol.for('labelflow.plumbing.client-error-listener');

/**
 * pg-pool drops its idle error listener on checkout, and pg emits 'error' when a checked-out
 * client's connection ends (a restart, a failover, pg_terminate_backend): unheard, that kills the
 * process. The query in flight rejects with the cause, which is what the caller acts on.
 */
function listenForConnectionErrors(client: pg.PoolClient): void {
  const marked = client as pg.PoolClient & { [LISTENED]?: true };
  if (marked[LISTENED]) return;
  marked[LISTENED] = true;
  client.on('error', () => undefined);
}

export interface TransactionOptions<T> {
  /**
   * `SET LOCAL lock_timeout`, sent with `BEGIN` in the same round trip: every lock wait inside the
   * transaction fails with SQLSTATE 55P03 after this many ms instead of waiting for the holder.
   */
  readonly lockTimeoutMs?: number;
  /**
   * Whether to commit what the body returned. `false` rolls back and still returns the result, for
   * outcomes that are answers rather than errors (a duplicate found, a 5xx the caller sends).
   * Default: always commit.
   */
  readonly commitIf?: (result: T) => boolean;
  /**
   * `REPEATABLE READ READ ONLY`: every statement of the body reads the same snapshot, taken at its
   * first statement, and none may write. For a read made of several queries whose answers must
   * agree (a balance and the entries it sums), where READ COMMITTED lets a commit land between them.
   */
  readonly snapshot?: boolean;
}

/**
 * Runs `fn` in one transaction on a client of `pool`: BEGIN, the body (as a transaction body, see
 * `asTransactionBody`, when the pool refuses nested connections), then COMMIT, or ROLLBACK when it
 * throws (rethrown) or `commitIf` says no.
 * The client goes back to the pool, unless even the ROLLBACK failed: a connection that cannot roll
 * back is broken and is discarded, not handed to the next caller.
 */
export async function withTransaction<T>(pool: pg.Pool, fn: (tx: pg.PoolClient) => Promise<T>, options: TransactionOptions<T> = {}): Promise<T> {
  if (options.lockTimeoutMs !== undefined) requirePositiveInteger('lockTimeoutMs', options.lockTimeoutMs);
  // A span under the request or delivery being traced (none for untraced background work); the
  // wait for a pool connection is inside it, since the caller waits for it too.
  return withChildSpan('db transaction', { 'db.system.name': 'postgresql' }, (span) => transact(pool, fn, options, span));
}

async function transact<T>(pool: pg.Pool, fn: (tx: pg.PoolClient) => Promise<T>, { lockTimeoutMs, commitIf, snapshot }: TransactionOptions<T>, span: TraceSpan | undefined): Promise<T> {
  return onClient(pool, async (client) => {
    await client.query(beginSql(lockTimeoutMs, snapshot));
    const result = await (isGuarded(pool) ? asTransactionBody(() => fn(client)) : fn(client));
    const commit = !commitIf || commitIf(result);
    const ended = await client.query(commit ? 'COMMIT' : 'ROLLBACK');
    // PostgreSQL answers COMMIT of an aborted transaction with a ROLLBACK tag, not an error: a body
    // that swallowed a failed statement would otherwise pass for committed (offsets resolved,
    // Redis keys marked done, a 2xx sent) with nothing written.
    if (commit && ended.command !== 'COMMIT') {
      span?.annotate({}, { 'labelflow.db.outcome': 'rollback' });
      throw new PlumbingError(PlumbingErrors.TRANSACTION_ROLLED_BACK, 'the transaction was rolled back at COMMIT: one of its statements had failed');
    }
    span?.annotate({}, { 'labelflow.db.outcome': commit ? 'commit' : 'rollback' });
    return result;
  });
}

const beginSql = (lockTimeoutMs: number | undefined, snapshot = false) => {
  const begin = snapshot ? 'BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY' : 'BEGIN';
  return lockTimeoutMs === undefined ? begin : `${begin}; SET LOCAL lock_timeout = ${lockTimeoutMs}`;
};

/**
 * Runs `work` on a client of `pool`. If it throws, a ROLLBACK (a no-op when no transaction is
 * open) and the error rethrown. The client goes back to the pool, unless even the ROLLBACK failed:
 * a connection that cannot roll back is broken and is discarded, not handed to the next caller.
 */
async function onClient<T>(pool: pg.Pool, work: (client: pg.PoolClient) => Promise<T>): Promise<T> {
  const client = await pool.connect();
  listenForConnectionErrors(client);
  let broken: Error | undefined;
  try {
    return await work(client);
  } catch (error) {
    await client.query('ROLLBACK').catch((rollbackError: unknown) => {
      broken = rollbackError instanceof Error ? rollbackError : new Error(String(rollbackError));
    });
    throw error;
  } finally {
    client.release(broken);
  }
}

/**
 * One statement in a transaction of its own (under `SET LOCAL lock_timeout`), in one round trip:
 * BEGIN, the statement and COMMIT are queued on one connection together, and node-postgres sends
 * each as soon as the one before is answered, from its socket handler, so nothing waits for this
 * process's event loop between them. (`withTransaction` resumes the caller between statements:
 * under load each of those resumptions also waits for whatever the loop is running.) If the
 * statement fails, the COMMIT ends an aborted transaction, which PostgreSQL answers as ROLLBACK.
 * So the statement must be all-or-nothing on its own: a data-modifying statement whose writes are
 * gated in SQL, never one whose result decides whether to commit.
 */
export async function runInOwnTransaction<R extends pg.QueryResultRow>(pool: pg.Pool, sql: string, params: readonly unknown[], { lockTimeoutMs }: { readonly lockTimeoutMs?: number } = {}): Promise<pg.QueryResult<R>> {
  if (lockTimeoutMs !== undefined) requirePositiveInteger('lockTimeoutMs', lockTimeoutMs);
  return withChildSpan('db transaction', { 'db.system.name': 'postgresql' }, () =>
    onClient(pool, async (client) => {
      const [begin, statement, commit] = await Promise.allSettled([client.query(beginSql(lockTimeoutMs)), client.query<R>(sql, params as unknown[]), client.query('COMMIT')]);
      for (const step of [begin, statement, commit]) if (step.status === 'rejected') throw step.reason;
      return (statement as PromiseFulfilledResult<pg.QueryResult<R>>).value;
    }),
  );
}
