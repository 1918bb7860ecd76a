import pg from 'pg';

/**
 * A `pg.Pool` whose connections' errors are handed to `onError` instead of thrown. An idle
 * connection the server ends (a restart, `pg_terminate_backend`, an idle timeout) makes the pool
 * emit 'error', and a lent one emits it on the client; with no listener either is an uncaught
 * exception, so a tool would exit 1 ("a violation") for what is "could not run" (2), or for nothing
 * at all: the pool drops an idle connection that failed and opens another on the next query, and a
 * query on a failed connection rejects, which the caller reports.
 */
export function guardedPool(config: pg.PoolConfig, onError: (error: Error) => void): pg.Pool {
  const pool = new pg.Pool(config);
  pool.on('error', onError);
  // The pool's own listener is off a client while it is lent: ours covers that stretch only, so
  // an idle client's error is reported once (through the pool), not twice.
  pool.on('acquire', (client) => client.on('error', onError));
  pool.on('release', (_error, client) => client.removeListener('error', onError));
  return pool;
}
