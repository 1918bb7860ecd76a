import type pg from 'pg';
import { pgArray } from '@labelflow/plumbing';
import type { Logger, Metrics } from '@labelflow/telemetry';
import type { Pending } from './relay-batch';

/** One row of the relay's read (readSql). */
export interface ReadRow {
  id: string;
  topic: string;
  message_key: string;
  /** The payload's JSON text, as the service wrote it (json, or jsonb printed before the lean-rows step): parsing it to print it again cost the relay more than the read. */
  payload: string;
  headers: Record<string, string>;
  /** An earlier row of the same key is parked (failed_at set): this one must not overtake it. */
  held: boolean;
  /** Pending rows found after the cursor, before the byte cut. */
  fetched: number;
  /** Pending rows at or below the read's cursor, in the read's snapshot. */
  behind: number;
}

export const FailReason = { tooLarge: 'too_large', held: 'held' } as const;
export type FailReason = (typeof FailReason)[keyof typeof FailReason];

/**
 * One statement, one snapshot. `head` walks the pending ids (outbox_pending) from the lowest, as
 * a relay that re-reads from the start would, but narrowly (ids and sizes only), skipping the rows
 * whose mark is under way ($4), and at most `outstanding + limit` of them: the rows at or below
 * the cursor are this drain's own outstanding rows plus any row that committed after the cursor
 * passed it (`behind` counts both). The rows after the cursor are cut once those before one
 * already hold `maxBatchBytes` (the stored size for small payloads, the JSON text's size for large
 * ones, which are stored compressed), and only the rows kept are fetched whole. Each says whether
 * an earlier row of its key is parked. Only the ids after the cursor are looked up in the outbox
 * (those at or below it are only counted), by its primary key, one probe per id: `OFFSET 0`
 * keeps each lateral subquery from being pulled up into a join, which PostgreSQL planned as a
 * hash or merge join over the whole outbox (every published row kept, walked on every read:
 * 6 ms a read at 26,000 rows, growing with the retention).
 * $1 cursor, $2 maxBatchBytes, $3 outstanding + limit, $4 ids being marked.
 */
export const readSql = `
WITH head AS MATERIALIZED (
  SELECT id FROM outbox_pending WHERE NOT (id = ANY($4::bigint[])) ORDER BY id LIMIT $3
), fresh AS MATERIALIZED (
  SELECT h.id, sum(o.size) OVER (ORDER BY h.id) - o.size AS bytes_before
  FROM head h
  CROSS JOIN LATERAL (SELECT CASE WHEN pg_column_size(payload) > 2000 THEN octet_length(payload::text) ELSE pg_column_size(payload) END AS size
                      FROM outbox WHERE outbox.id = h.id OFFSET 0) o
  WHERE h.id > $1
), cut AS MATERIALIZED (
  SELECT (SELECT count(*) FROM head WHERE id <= $1)::int AS behind,
         (SELECT count(*) FROM fresh)::int AS fetched,
         (SELECT max(id) FROM fresh WHERE bytes_before < $2) AS last,
         EXISTS (SELECT 1 FROM outbox WHERE failed_at IS NOT NULL) AS any_parked
)
SELECT o.id, o.topic, o.message_key, o.payload::text AS payload, o.headers,
       (SELECT any_parked FROM cut) AND EXISTS (SELECT 1 FROM outbox f WHERE f.failed_at IS NOT NULL AND f.message_key = o.message_key AND f.id < o.id) AS held,
       (SELECT fetched FROM cut) AS fetched, (SELECT behind FROM cut) AS behind
FROM fresh h CROSS JOIN LATERAL (SELECT * FROM outbox WHERE outbox.id = h.id OFFSET 0) o
WHERE h.id <= (SELECT last FROM cut)
ORDER BY h.id`;

/** The planner settings of the relay's LISTEN session, which runs readSql (see createOutboxRelay's connectListener). */
export const readSessionSql = 'SET enable_seqscan = off; SET enable_bitmapscan = off; SET plan_cache_mode = force_custom_plan';

/** Whether the outbox has its pending-rows list (outboxPendingMigrationSql), which the relay reads and marks. */
export async function hasPendingTable(pool: pg.Pool): Promise<boolean> {
  const { rows } = await pool.query<{ ok: boolean }>(`SELECT to_regclass('outbox_pending') IS NOT NULL AS ok`);
  return rows[0]?.ok === true;
}

export interface RowMarks {
  /** Takes the rows off the pending list: Kafka acknowledged them. */
  markPublished(rows: readonly Pending[]): Promise<void>;
  /** Sets failed_at and takes the rows off the pending list: the relay gives up on them, for `reason`. */
  park(rows: readonly Pending[], reason: FailReason, failure: string): Promise<void>;
  /** Parks rows that an earlier parked row of their key holds back. */
  parkHeld(rows: readonly Pending[]): Promise<void>;
}

/** The relay's writes to its rows, on pool connections (never the LISTEN session, which reads). */
export function createRowMarks({ pool, logger, metrics }: { readonly pool: pg.Pool; readonly logger: Logger; readonly metrics?: Metrics }): RowMarks {
  const published = metrics?.counter('outbox_published_total', 'Outbox rows published to Kafka');
  const parked = metrics?.counter('outbox_failed_total', 'Outbox rows given up on (failed_at set): too_large for their topic, or held behind such a row of the same key', ['reason']);

  const park: RowMarks['park'] = async (rows, reason, failure) => {
    await pool.query(
      `WITH parked AS (UPDATE outbox SET failed_at = now(), failure = $2 WHERE id = ANY($1::bigint[]))
       DELETE FROM outbox_pending WHERE id = ANY($1::bigint[])`,
      [pgArray(rows.map((r) => r.id)), failure.slice(0, 2000)],
    );
    parked?.inc({ reason }, rows.length);
  };

  return {
    async markPublished(rows) {
      await pool.query('DELETE FROM outbox_pending WHERE id = ANY($1::bigint[])', [pgArray(rows.map((r) => r.id))]);
      published?.inc(rows.length);
    },
    park,
    async parkHeld(rows) {
      await park(rows, FailReason.held, 'held: an earlier row of the same message_key is parked (failed_at set)');
      logger.error(
        { outboxIds: rows.map((r) => r.id), keys: [...new Set(rows.map((r) => r.message.key))] },
        'outbox rows held behind a parked row of the same key; not published (failed_at set)',
      );
    },
  };
}
