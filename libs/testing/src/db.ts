import { uniqueName } from './names';
import pg from 'pg';

/** Creates an empty database for one test and returns its URL; `drop` removes it. */
export async function createTestDatabase(pgUrl: string, name: string): Promise<{ url: string; drop: () => Promise<void> }> {
  const admin = new pg.Client({ connectionString: `${pgUrl}/postgres` });
  await admin.connect();
  try {
    await admin.query(`CREATE DATABASE "${name}"`);
  } finally {
    await admin.end();
  }
  return { url: `${pgUrl}/${name}`, drop: () => dropDatabase(pgUrl, name) };
}

export async function dropDatabase(pgUrl: string, name: string): Promise<void> {
  const admin = new pg.Client({ connectionString: `${pgUrl}/postgres` });
  await admin.connect();
  try {
    await admin.query(`DROP DATABASE IF EXISTS "${name}" WITH (FORCE)`);
  } finally {
    await admin.end();
  }
}

/** Runs one query against a database URL and returns its rows (assertions on service state). */
export async function queryRows<R extends Record<string, unknown>>(url: string, text: string, values: unknown[] = []): Promise<R[]> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    return (await client.query<R>(text, values)).rows;
  } finally {
    await client.end();
  }
}

/**
 * A pool for a test database. Dropping the database WITH (FORCE) terminates sessions that are
 * still closing; the pool re-emits that as an 'error' event, which without a listener would crash
 * the test run although every test passed.
 */
export function createTestPool(url: string, max = 10): pg.Pool {
  const pool = new pg.Pool({ connectionString: url, max });
  pool.on('error', () => undefined);
  return pool;
}

/**
 * A fresh database for one describe block, prepared by `setup` (migrations): `open()` in
 * beforeAll, `close()` in afterAll (this file stays free of vitest, so tools can import the lib).
 * `pool` makes the pool another way, e.g. a service's own `createPool` with its prepared statements.
 */
export function freshDatabase(
  pgUrl: string,
  name: string,
  setup: (pool: pg.Pool) => Promise<unknown>,
  options: { readonly pool?: (url: string) => pg.Pool } = {},
): { open(): Promise<pg.Pool>; close(): Promise<void> } {
  let pool: pg.Pool | undefined;
  let drop: (() => Promise<void>) | undefined;
  return {
    async open() {
      const db = await createTestDatabase(pgUrl, uniqueName(name));
      drop = db.drop;
      pool = (options.pool ?? createTestPool)(db.url);
      await setup(pool);
      return pool;
    },
    async close() {
      await pool?.end();
      await drop?.();
    },
  };
}

/** A latch one transaction opens and another waits on, to put two transactions' steps in a known order. */
export function latch(): { readonly open: () => void; readonly opened: Promise<void> } {
  let open!: () => void;
  const opened = new Promise<void>((resolve) => (open = resolve));
  return { open, opened };
}

/**
 * Runs `work` inside `tx` the way a long-lived pooled connection ends up running its prepared
 * statements, with generic plans (`plan_cache_mode = force_generic_plan` for the rest of the
 * transaction), and returns how many sequential scans of each table it made
 * (`pg_stat_xact_user_tables`: the transaction's own counts, current at once). A batch statement
 * whose generic plan scans a whole table reads every row a service ever wrote, on every batch.
 */
export async function seqScansOf(tx: Pick<pg.ClientBase, 'query'>, tables: readonly string[], work: () => Promise<unknown>): Promise<Record<string, number>> {
  const counts = async () =>
    new Map((await tx.query<{ relname: string; n: string }>('SELECT relname, seq_scan AS n FROM pg_stat_xact_user_tables WHERE relname = ANY($1::text[])', [tables])).rows.map((r) => [r.relname, Number(r.n)]));
  await tx.query('SET LOCAL plan_cache_mode = force_generic_plan');
  const before = await counts();
  await work();
  const after = await counts();
  return Object.fromEntries(tables.map((t) => [t, (after.get(t) ?? 0) - (before.get(t) ?? 0)]));
}
