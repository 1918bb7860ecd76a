import type pg from 'pg';
import { pgArray } from '@labelflow/plumbing';
import type { Logger, Metrics } from '@labelflow/telemetry';
import { messagesEnded, type Pending } from './relay-batch';

/** One row of the relay's read (readSql). */
export interface ReadRow {
  id: string;
  topic: string;
  message_key: string;
  /** The payload's JSON text, as the service wrote it (json, or jsonb printed before the lean-rows step): parsing it to print it again cost the relay more than the read. */
  payload: string;
  headers: Record<string, string>;
  /** A bundle's frames (outboxBundlesMigrationSql), or null for a plain row. */
  messages: string | null;
  /** While any row is parked: each key with a parked row, and the lowest such row's id (a bundle's keys are all its frames'). Null otherwise. The same on every row of a read. */
  parked: Record<string, string> | null;
  /** Pending rows found after the cursor, before the byte cut. */
  fetched: number;
  /** Pending rows at or below the read's cursor, in the read's snapshot. */
  behind: number;
}

export const FailReason = { tooLarge: 'too_large', held: 'held', unreadable: 'unreadable' } as const;
export type FailReason = (typeof FailReason)[keyof typeof FailReason];

/**
 * One statement, one snapshot. `head` walks the pending ids (outbox_pending) from the lowest, as
 * a relay that re-reads from the start would, but narrowly (ids and sizes only), skipping the rows
 * whose mark is under way ($4), and at most `known + limit` of them: the rows at or below the
 * cursor are this drain's own unmarked rows ($5) plus any row that committed after the cursor
 * passed it, which `behind` counts (those not in $5). The rows after the cursor are cut once those before one
 * already hold `maxBatchBytes` (the stored size for small payloads, the JSON text's size for large
 * ones, which are stored compressed, and a bundle's frames' size, which its TOAST pointer holds),
 * and only the rows kept are fetched whole. Only the ids after the cursor are looked up in the
 * outbox (those at or below it are only counted), by its primary key, one probe per id: `OFFSET 0`
 * keeps each lateral subquery from being pulled up into a join, which PostgreSQL planned as a
 * hash or merge join over the whole outbox (every published row kept, walked on every read:
 * 6 ms a read at 26,000 rows, growing with the retention).
 * While any row is parked (rare: a row too large for its topic, and what it holds back), the read
 * also lists the parked keys, a bundle's from its frames, so that the relay holds every later
 * message of those keys, in a plain row or in a bundle.
 * $1 cursor, $2 maxBatchBytes, $3 known + limit, $4 ids being marked, $5 the drain's read ids not being marked. Without the bundles
 * step (`bundles: false`) the outbox has plain rows only, and the read names no `messages` column.
 */
export const readSqlFor = ({ bundles }: { readonly bundles: boolean }): string => `
WITH head AS MATERIALIZED (
  SELECT id FROM outbox_pending WHERE NOT (id = ANY($4::bigint[])) ORDER BY id LIMIT $3
), fresh AS MATERIALIZED (
  SELECT h.id, sum(o.size) OVER (ORDER BY h.id) - o.size AS bytes_before
  FROM head h
  CROSS JOIN LATERAL (SELECT CASE ${bundles ? 'WHEN messages IS NOT NULL THEN octet_length(messages) ' : ''}WHEN pg_column_size(payload) > 2000 THEN octet_length(payload::text) ELSE pg_column_size(payload) END AS size
                      FROM outbox WHERE outbox.id = h.id OFFSET 0) o
  WHERE h.id > $1
), cut AS MATERIALIZED (
  SELECT (SELECT count(*) FROM head WHERE id <= $1 AND NOT (id = ANY($5::bigint[])))::int AS behind,
         (SELECT count(*) FROM fresh)::int AS fetched,
         (SELECT max(id) FROM fresh WHERE bytes_before < $2) AS last,
         EXISTS (SELECT 1 FROM outbox WHERE failed_at IS NOT NULL) AS any_parked
), parked AS MATERIALIZED (
  SELECT CASE WHEN (SELECT any_parked FROM cut) THEN (
    SELECT json_object_agg(k, first::text) FROM (
      SELECT k, min(id) AS first FROM (
        SELECT message_key AS k, id FROM outbox WHERE failed_at IS NOT NULL${bundles ? ` AND messages IS NULL
        UNION ALL
        SELECT split_part(f, E'\\x1f', 3), id FROM outbox CROSS JOIN LATERAL unnest(string_to_array(messages, E'\\x1e')) AS f WHERE failed_at IS NOT NULL AND messages IS NOT NULL` : ''}
      ) keys GROUP BY k
    ) firsts) END AS keys
)
SELECT o.id, o.topic, o.message_key, o.payload::text AS payload, o.headers, ${bundles ? 'o.messages' : 'NULL::text AS messages'},
       (SELECT keys FROM parked) AS parked,
       (SELECT fetched FROM cut) AS fetched, (SELECT behind FROM cut) AS behind
FROM fresh h CROSS JOIN LATERAL (SELECT * FROM outbox WHERE outbox.id = h.id OFFSET 0) o
WHERE h.id <= (SELECT last FROM cut)
ORDER BY h.id`;

/** The read of an outbox with every step applied. */
export const readSql = readSqlFor({ bundles: true });

/** The planner settings of the relay's LISTEN session, which runs readSql (see createOutboxRelay's connectListener). */
export const readSessionSql = 'SET enable_seqscan = off; SET enable_bitmapscan = off; SET plan_cache_mode = force_custom_plan';

/**
 * The server side's watch over the relay's LISTEN session, which holds the leader's advisory lock:
 * a leader whose host died or was cut off sends no FIN, and without these PostgreSQL keeps the
 * session, and the lock, for as long as the kernel's defaults take to give up on it (two hours of
 * silence before a keepalive, or some fifteen minutes of retransmission once a NOTIFY is unsent),
 * while every standby is refused the lock and nothing is published. With them it is closed within
 * about 25 s of silence, or 30 s after a write goes unacknowledged. Ignored on a Unix socket.
 */
export const leaseSessionSql =
  "SET tcp_keepalives_idle = 10; SET tcp_keepalives_interval = 5; SET tcp_keepalives_count = 3; SELECT set_config('tcp_user_timeout', '30000', false) WHERE current_setting('server_version_num')::int >= 120000";

/** Which later steps the outbox has: its pending-rows list (outboxPendingMigrationSql), which the relay reads and marks, and bundles (outboxBundlesMigrationSql). */
export async function outboxShape(pool: pg.Pool): Promise<{ readonly pending: boolean; readonly bundles: boolean }> {
  const { rows } = await pool.query<{ pending: boolean; bundles: boolean }>(
    `SELECT to_regclass('outbox_pending') IS NOT NULL AS pending,
            EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = 'outbox'::regclass AND attname = 'messages' AND NOT attisdropped) AS bundles`,
  );
  return { pending: rows[0]?.pending === true, bundles: rows[0]?.bundles === true };
}

export interface RowMarks {
  /** Takes the rows off the pending list: Kafka acknowledged them. Only rows' last messages (`ends` > 0) are passed. */
  markPublished(rows: readonly Pending[]): Promise<void>;
  /** Sets failed_at and takes the rows off the pending list: the relay gives up on them, for `reason`. */
  park(rows: readonly Pending[], reason: FailReason, failure: string): Promise<void>;
  /**
   * Parks rows that an earlier parked row of their key holds back, if one still does: an operator
   * may have released the key since the read that held them. A row it leaves stays pending, and
   * the next read, finding it below its cursor, starts over from the lowest id.
   */
  parkHeld(rows: readonly Pending[]): Promise<void>;
  /** Parks a row the relay cannot read into messages (a bundle whose frames are malformed), so that it blocks nothing. */
  parkUnreadable(rows: readonly Pending[], error: unknown): Promise<void>;
}

/**
 * Parks the held rows ($1 ids, $2 the key each was held for) that a parked row of that key with a
 * lower id still holds, in one statement, and returns their ids. A parked bundle holds its row's
 * key and every key its frames name (an unreadable one may name none: the drain holds its row's
 * key). Without the bundles step the outbox has plain rows only.
 */
export const parkHeldSqlFor = ({ bundles }: { readonly bundles: boolean }): string => `
WITH held(id, k) AS (SELECT * FROM unnest($1::bigint[], $2::text[])),
blocked AS (
  SELECT DISTINCT h.id FROM held h
  WHERE EXISTS (SELECT 1 FROM outbox p WHERE p.failed_at IS NOT NULL AND p.id < h.id AND p.message_key = h.k)${
    bundles
      ? `
     OR EXISTS (SELECT 1 FROM outbox p WHERE p.failed_at IS NOT NULL AND p.id < h.id AND p.messages IS NOT NULL
                AND h.k IN (SELECT split_part(f, E'\x1f', 3) FROM unnest(string_to_array(p.messages, E'\x1e')) AS f))`
      : ''
  }
), parked AS (
  UPDATE outbox SET failed_at = now(), failure = $3 WHERE id IN (SELECT id FROM blocked) RETURNING id
)
DELETE FROM outbox_pending WHERE id IN (SELECT id FROM parked) RETURNING id`;

/** The relay's writes to its rows, on pool connections (never the LISTEN session, which reads). */
export function createRowMarks({
  pool,
  logger,
  metrics,
  bundles = () => true,
}: {
  readonly pool: pg.Pool;
  readonly logger: Logger;
  readonly metrics?: Metrics;
  /** Whether the outbox has the bundles step, as the leader last found it. */
  readonly bundles?: () => boolean;
}): RowMarks {
  const published = metrics?.counter('outbox_published_total', 'Outbox rows published to Kafka');
  const parked = metrics?.counter('outbox_failed_total', 'Outbox rows given up on (failed_at set): too_large for their topic, unreadable (a bundle whose frames cannot be read), or held behind such a row of the same key', ['reason']);

  // A bundle's messages share their row's id: a row is parked (and counted) once.
  const idsOf = (rows: readonly Pending[]) => [...new Set(rows.map((r) => r.id))];

  const park: RowMarks['park'] = async (rows, reason, failure) => {
    const ids = idsOf(rows);
    await pool.query(
      `WITH parked AS (UPDATE outbox SET failed_at = now(), failure = $2 WHERE id = ANY($1::bigint[]))
       DELETE FROM outbox_pending WHERE id = ANY($1::bigint[])`,
      [pgArray(ids), failure.slice(0, 2000)],
    );
    parked?.inc({ reason }, ids.length);
  };

  return {
    async markPublished(rows) {
      await pool.query('DELETE FROM outbox_pending WHERE id = ANY($1::bigint[])', [pgArray(rows.map((r) => r.id))]);
      published?.inc(messagesEnded(rows));
    },
    park,
    async parkHeld(rows) {
      // One (id, key) pair per message: a bundle is held for any of its keys.
      const pairs = [...new Map(rows.map((r) => [`${r.id} ${r.message.key}`, r])).values()];
      const { rows: done } = await pool.query<{ id: string }>(parkHeldSqlFor({ bundles: bundles() }), [
        pgArray(pairs.map((r) => r.id)),
        pgArray(pairs.map((r) => r.message.key)),
        'held: an earlier row of the same message_key is parked (failed_at set)',
      ]);
      if (done.length === 0) return;
      const ids = new Set(done.map((r) => String(r.id)));
      parked?.inc({ reason: FailReason.held }, ids.size);
      logger.error(
        { outboxIds: [...ids], keys: [...new Set(rows.filter((r) => ids.has(r.id)).map((r) => r.message.key))] },
        'outbox rows held behind a parked row of the same key; not published (failed_at set)',
      );
    },
    async parkUnreadable(rows, error) {
      await park(rows, FailReason.unreadable, `unreadable: ${(error as Error).message}`);
      logger.error({ outboxIds: idsOf(rows), err: error }, 'outbox row unreadable; parked (failed_at set), later rows of its key are held behind it');
    },
  };
}
