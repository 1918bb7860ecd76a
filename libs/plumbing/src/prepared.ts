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
  pool.on('connect', (client) => {
    const marked = client as pg.PoolClient & { [PREPARED]?: true };
    if (marked[PREPARED]) return;
    marked[PREPARED] = true;
    const query = client.query.bind(client) as (...args: unknown[]) => unknown;
    client.query = ((...args: unknown[]) => {
      const [text, values, ...rest] = args;
      if (typeof text !== 'string' || !Array.isArray(values) || values.length === 0) return query(...args);
      const name = nameOf(text);
      return name === undefined ? query(...args) : query({ name, text, values }, ...rest);
    }) as typeof client.query;
  });
  return pool;
}
