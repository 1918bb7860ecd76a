import type { Queryable } from './db';

/**
 * Keeping the planner's statistics of a service's own tables current when the server does not.
 *
 * The services run every statement as a named prepared statement, and PostgreSQL keeps a generic
 * plan per connection once it seems as cheap as the custom ones. A plan made while a table was
 * empty or never analyzed (a fresh database) scans the whole table: a batch `UPDATE … FROM
 * unnest(…)` as a hash join over a sequential scan, a `WHERE task_id = ANY($1)` load likewise. Only
 * an ANALYZE of the table replaces that plan. With autovacuum on, PostgreSQL runs it once enough
 * rows changed. With autovacuum off (some shared development servers), nothing ever does, and
 * every consumed batch reads every row the service ever wrote: on the 2-core machine the stack
 * sustained 40 sagas/s after 7,000 sagas against 55/s once its tables had been analyzed.
 */

export interface StaleTable {
  readonly table: string;
  readonly changedRows: number;
}

/**
 * The tables of the connected database that autovacuum's default rule would analyze now: more rows
 * inserted, updated or deleted since their last ANALYZE than 50 plus 10 % of the rows it counted
 * (a table never analyzed counts none).
 */
export async function staleTables(db: Queryable): Promise<StaleTable[]> {
  const { rows } = await db.query<{ table_name: string; changed: string }>(
    `SELECT format('%I.%I', s.schemaname, s.relname) AS table_name, s.n_mod_since_analyze AS changed
       FROM pg_stat_user_tables s JOIN pg_class c ON c.oid = s.relid
      WHERE s.n_mod_since_analyze > 50 + 0.1 * greatest(c.reltuples, 0)
      ORDER BY s.n_mod_since_analyze DESC`,
  );
  return rows.map((r) => ({ table: r.table_name, changedRows: Number(r.changed) }));
}

/** Whether the server analyzes tables by itself (`autovacuum`, with the row counts it needs). */
export async function autovacuumRuns(db: Queryable): Promise<boolean> {
  const { rows } = await db.query<{ on: boolean }>(`SELECT current_setting('autovacuum') = 'on' AND current_setting('track_counts') = 'on' AS on`);
  return rows[0]?.on === true;
}

/**
 * One round of what autovacuum would do for statistics: ANALYZEs each stale table, skipping one
 * that another session is analyzing or vacuuming right now (two instances of a service need not
 * wait for each other). Returns what it analyzed; nothing while autovacuum runs.
 */
export async function analyzeStaleTables(db: Queryable): Promise<StaleTable[]> {
  if (await autovacuumRuns(db)) return [];
  const stale = await staleTables(db);
  // The name comes from format('%I.%I'): quoted by PostgreSQL itself.
  for (const { table } of stale) await db.query(`ANALYZE (SKIP_LOCKED) ${table}`);
  return stale;
}
