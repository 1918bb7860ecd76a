/** What a query answers, as far as the libraries read it: pg's `QueryResult` fits. */
export interface QueryResultLike<R> {
  readonly rows: R[];
  readonly rowCount: number | null;
}

/**
 * What repositories, stores and emitters take: a `pg.Pool`, a `pg.PoolClient` inside a
 * transaction, or an in-memory fake in a unit test. Structural on purpose, so any of them fits
 * without a cast and no library has to name pg's overloads.
 */
export interface Queryable {
  query<R extends object = Record<string, unknown>>(text: string, values?: readonly unknown[]): Promise<QueryResultLike<R>>;
}
