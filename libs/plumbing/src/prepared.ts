import type pg from 'pg';

export interface PreparedStatementsOptions {
  /**
   * Distinct statement texts this process names at most; later ones run unnamed. Bounds the
   * statements each connection keeps on the server when some texts are built on the fly.
   */
  readonly maxStatements?: number;
}

const PREPARED = Symbol.for('labelflow.plumbing.prepared-statements');

/**
 * PostgreSQL's answer to a prepared statement whose result columns changed under it: another
 * instance's migration added a column to a table it reads with `*` or `RETURNING *`. The statement
 * stays broken on that connection for good (node-postgres never parses a named statement again),
 * while the same work on a fresh connection succeeds.
 */
export const isStalePreparedStatement = (error: unknown): boolean =>
  typeof error === 'object' && error !== null && (error as { code?: unknown }).code === '0A000' && /cached plan must not change result type/i.test(String((error as { message?: unknown }).message));

/**
 * Makes every parameterised query of the pool's clients a named prepared statement, so PostgreSQL
 * parses and plans each distinct text once per connection instead of on every call. A saga runs
 * the same few dozen statements thousands of times; unnamed, each one pays parse and plan again,
 * which on a busy PostgreSQL is a large share of its CPU per statement. Queries without values
 * (BEGIN, COMMIT, a multi-statement text) keep the simple protocol untouched. The names are drawn
 * per process from the text, so every connection of the pool shares them.
 */
export function usePreparedStatements(pool: pg.Pool, options: PreparedStatementsOptions = {}): pg.Pool {
  const max = options.maxStatements ?? 500;
  const names = new Map<string, string>();
  const nameOf = (text: string): string | undefined => {
    let name = names.get(text);
    if (name === undefined && names.size < max) names.set(text, (name = `lf_${names.size + 1}`));
    return name;
  };
  /** Connections a stale statement broke: closed when released, so the retry gets a fresh one that prepares again. */
  const stale = new WeakSet<pg.PoolClient>();
  const staleError = () => new Error('prepared statements of a table whose columns changed');
  pool.on('connect', (client) => {
    const marked = client as pg.PoolClient & { [PREPARED]?: true };
    if (marked[PREPARED]) return;
    marked[PREPARED] = true;
    const query = client.query.bind(client) as (...args: unknown[]) => unknown;
    const noteStale = (error: unknown) => {
      if (isStalePreparedStatement(error)) stale.add(client);
      throw error;
    };
    client.query = ((...args: unknown[]) => {
      const [text, values, ...rest] = args;
      if (typeof text !== 'string' || !Array.isArray(values) || values.length === 0) return query(...args);
      const name = nameOf(text);
      if (name === undefined) return query(...args);
      const callback = rest.find((r) => typeof r === 'function') as ((error: Error | null, result?: unknown) => void) | undefined;
      if (!callback) return (query({ name, text, values }, ...rest) as Promise<unknown>).catch(noteStale);
      return query({ name, text, values }, (error: Error | null, result: unknown) => {
        if (error && isStalePreparedStatement(error)) stale.add(client);
        callback(error, result);
      });
    }) as typeof client.query;
  });
  // pg-pool gives each checkout a fresh `release`; wrapped here, on every checkout (pool.query's own included).
  type Checkout = (error: Error | undefined, client: pg.PoolClient | undefined, done: (release?: Error | boolean) => void) => void;
  const connect = pool.connect.bind(pool) as (callback?: Checkout) => Promise<pg.PoolClient> | undefined;
  const closingIfStale = (client: pg.PoolClient): pg.PoolClient => {
    const release = client.release;
    client.release = ((error?: Error | boolean) => release.call(client, error || (stale.has(client) ? staleError() : undefined))) as typeof client.release;
    return client;
  };
  pool.connect = ((callback?: Checkout) => {
    if (!callback) return (connect() as Promise<pg.PoolClient>).then(closingIfStale);
    return connect((error, client, done) => (client ? callback(error, closingIfStale(client), client.release) : callback(error, client, done)));
  }) as typeof pool.connect;
  return pool;
}
