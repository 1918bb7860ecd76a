import type { PoolClient, Queryable } from './db';

/**
 * Doing for a service's own tables what autovacuum does, when the server does not.
 *
 * The services run every statement as a named prepared statement, and PostgreSQL keeps a generic
 * plan per connection once it seems as cheap as the custom ones. A plan made while a table was
 * empty or never analyzed (a fresh database) scans the whole table: a `WHERE task_id = ANY($1)`
 * load, for one. Only an ANALYZE of the table replaces that plan. With autovacuum on, PostgreSQL
 * runs it once enough rows changed, and vacuums away the dead row versions every update leaves.
 * With autovacuum off (some shared development servers), nothing ever does: every consumed batch
 * read every row the service ever wrote (on the 2-core machine the stack sustained 40 sagas/s after
 * 7,000 sagas, and 55/s once its tables had been analyzed), and dead rows pile up behind every
 * index (55 sagas/s on grown tables, 65 once they were vacuumed).
 */

export interface TableUpkeep {
  readonly table: string;
  /** Rows inserted, updated or deleted since the table's last ANALYZE. */
  readonly changedRows: number;
  readonly deadRows: number;
  /** Whether autovacuum's default rule would vacuum it now (its statistics are then renewed too). */
  readonly vacuum: boolean;
}

/**
 * The tables of the connected database that autovacuum's default rules would visit now: analyze
 * when more rows changed since the last ANALYZE than 50 plus 10 % of the rows it counted, vacuum
 * when more rows are dead than 50 plus 20 % of them (a table never analyzed counts none).
 */
export async function tablesDue(db: Queryable): Promise<TableUpkeep[]> {
  const { rows } = await db.query<{ table_name: string; changed: string; dead: string; vacuum: boolean }>(
    `SELECT table_name, changed, dead, dead > 50 + 0.2 * counted AS vacuum
       FROM (SELECT format('%I.%I', s.schemaname, s.relname) AS table_name, s.n_mod_since_analyze AS changed, s.n_dead_tup AS dead,
                    greatest(c.reltuples, 0) AS counted
               FROM pg_stat_user_tables s JOIN pg_class c ON c.oid = s.relid) t
      WHERE changed > 50 + 0.1 * counted OR dead > 50 + 0.2 * counted
      ORDER BY changed DESC, table_name`,
  );
  return rows.map((r) => ({ table: r.table_name, changedRows: Number(r.changed), deadRows: Number(r.dead), vacuum: r.vacuum }));
}

/** Whether the server vacuums and analyzes tables by itself (`autovacuum`, with the row counts it needs). */
export async function autovacuumRuns(db: Queryable): Promise<boolean> {
  const { rows } = await db.query<{ on: boolean }>(`SELECT current_setting('autovacuum') = 'on' AND current_setting('track_counts') = 'on' AS on`);
  return rows[0]?.on === true;
}

/**
 * One round of what autovacuum would do: `VACUUM (ANALYZE)` or `ANALYZE` on each table due,
 * skipping one another session is vacuuming or analyzing right now (two instances of a service
 * need not wait for each other). Returns what it visited; nothing while autovacuum runs. It takes
 * one connection, not a pool, and not inside a transaction: the pacing it sets for the session
 * (`vacuum_cost_delay` 2 ms, like autovacuum, so it does not take the machine from the services)
 * must hold for its own statements, and VACUUM cannot run inside a transaction.
 */
export async function upkeepTables(db: PoolClient): Promise<TableUpkeep[]> {
  if (await autovacuumRuns(db)) return [];
  const due = await tablesDue(db);
  if (due.length === 0) return [];
  await db.query('SET vacuum_cost_delay = 2');
  try {
    // The names come from format('%I.%I'): quoted by PostgreSQL itself.
    for (const { table, vacuum } of due) await db.query(vacuum ? `VACUUM (SKIP_LOCKED, ANALYZE) ${table}` : `ANALYZE (SKIP_LOCKED) ${table}`);
  } finally {
    await db.query('RESET vacuum_cost_delay');
  }
  return due;
}
