import { pgArray, type Queryable } from '@labelflow/plumbing';
import { formatKey, type DedupKey } from './key';

/** The authoritative dedup record, for a service's migrations. */
export const inboxMigrationSql = `
CREATE TABLE IF NOT EXISTS inbox (
  task_id      text        NOT NULL,
  event_type   text        NOT NULL,
  attempt      integer     NOT NULL,
  event_id     text        NOT NULL,
  source       text        NOT NULL,
  processed_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (task_id, event_type, attempt)
);
CREATE INDEX IF NOT EXISTS inbox_processed_at ON inbox (processed_at);
`;

export interface InboxEntry extends DedupKey {
  readonly eventId: string;
  /** Where the event came from, e.g. `labelflow.qa-events/3@1042`, for forensics. */
  readonly source: string;
}

/**
 * Records the key inside the caller's transaction. Returns false when the key was already there:
 * the event is a duplicate and the transaction must apply nothing. Because the insert and the state
 * change commit together, a crash can never leave one without the other.
 */
export async function recordInInbox(tx: Queryable, entry: InboxEntry): Promise<boolean> {
  const result = await tx.query(
    `INSERT INTO inbox (task_id, event_type, attempt, event_id, source) VALUES ($1, $2, $3, $4, $5)
     ON CONFLICT (task_id, event_type, attempt) DO NOTHING`,
    [entry.taskId, entry.eventType, entry.attempt, entry.eventId, entry.source],
  );
  return result.rowCount === 1;
}

/**
 * Records a batch of keys in one statement inside the caller's transaction and returns the ones
 * that were new (formatted with `formatKey`); the rest are duplicates the transaction must not
 * apply. Keys are inserted in sorted order, so two transactions inserting overlapping batches take
 * their row locks in the same order and wait for each other instead of deadlocking.
 */
export async function recordManyInInbox(tx: Queryable, entries: readonly InboxEntry[]): Promise<Set<string>> {
  if (entries.length === 0) return new Set();
  const { rows } = await tx.query<{ task_id: string; event_type: string; attempt: number }>(
    `INSERT INTO inbox (task_id, event_type, attempt, event_id, source)
     SELECT * FROM unnest($1::text[], $2::text[], $3::int[], $4::text[], $5::text[]) ORDER BY 1, 2, 3
     ON CONFLICT (task_id, event_type, attempt) DO NOTHING
     RETURNING task_id, event_type, attempt`,
    [pgArray(entries.map((e) => e.taskId)), pgArray(entries.map((e) => e.eventType)), pgArray(entries.map((e) => e.attempt)), pgArray(entries.map((e) => e.eventId)), pgArray(entries.map((e) => e.source))],
  );
  return new Set(rows.map((r) => formatKey({ taskId: r.task_id, eventType: r.event_type, attempt: r.attempt })));
}

/** Read access to the inbox for the gate: confirming Bloom "maybe"s and warming the filter. */
export interface InboxReader {
  readonly db: Queryable;
  /**
   * The keys processed in the last `windowMs`, newest first, at most `limit`, in pages of at most
   * `pageSize`: a page is let go before the next is read, so warming a filter of millions of keys
   * never holds them all as rows at once.
   */
  recentKeys(windowMs: number, limit: number, pageSize?: number): AsyncIterable<readonly DedupKey[]>;
}

interface InboxKeyRow {
  readonly task_id: string;
  readonly event_type: string;
  readonly attempt: number;
  /** As text: a Date would drop the microseconds the next page's cursor needs. */
  readonly at: string;
}

const recentSelect = `SELECT task_id, event_type, attempt, processed_at::text AS at FROM inbox WHERE processed_at > $1::timestamptz`;
const recentOrder = `ORDER BY processed_at DESC, task_id DESC, event_type DESC, attempt DESC LIMIT $2`;

export function inboxReader(db: Queryable): InboxReader {
  return {
    db,
    async *recentKeys(windowMs, limit, pageSize = 10_000) {
      // One cutoff for every page, so a slow warm does not shift its window while it reads.
      const { rows: cut } = await db.query<{ since: string }>(`SELECT (now() - ($1::bigint * interval '1 millisecond'))::text AS since`, [windowMs]);
      const since = cut[0]?.since;
      if (since === undefined) return;
      let after: InboxKeyRow | undefined;
      for (let left = limit; left > 0; ) {
        const want = Math.min(pageSize, left);
        // Keyset on the whole row: processed_at alone is shared by every key of one transaction.
        const { rows } = after
          ? await db.query<InboxKeyRow>(
              `${recentSelect} AND (processed_at, task_id, event_type, attempt) < ($3::timestamptz, $4, $5, $6) ${recentOrder}`,
              [since, want, after.at, after.task_id, after.event_type, after.attempt],
            )
          : await db.query<InboxKeyRow>(`${recentSelect} ${recentOrder}`, [since, want]);
        if (rows.length > 0) yield rows.map((r) => ({ taskId: r.task_id, eventType: r.event_type, attempt: r.attempt }));
        if (rows.length < want) return;
        left -= rows.length;
        after = rows[rows.length - 1];
      }
    },
  };
}

/** Which of `keys` the inbox holds, in one query. */
export async function findInInbox(inbox: InboxReader, keys: readonly DedupKey[]): Promise<Set<string>> {
  const { rows } = await inbox.db.query<{ task_id: string; event_type: string; attempt: number }>(
    `SELECT i.task_id, i.event_type, i.attempt FROM inbox i
     JOIN unnest($1::text[], $2::text[], $3::int[]) AS k(task_id, event_type, attempt)
       ON i.task_id = k.task_id AND i.event_type = k.event_type AND i.attempt = k.attempt`,
    [keys.map((k) => k.taskId), keys.map((k) => k.eventType), keys.map((k) => k.attempt)],
  );
  return new Set(rows.map((r) => formatKey({ taskId: r.task_id, eventType: r.event_type, attempt: r.attempt })));
}

/**
 * Deletes inbox rows older than the retention. A replay older than this is no longer recognised,
 * so the retention must exceed the longest replay the operators may run (and the Redis TTL).
 * Stops between batches once `signal` is aborted (a shutdown), the rest left to the next prune.
 */
export async function pruneInbox(db: Queryable, retentionMs: number, batch = 10_000, signal?: AbortSignal): Promise<number> {
  let total = 0;
  while (signal?.aborted !== true) {
    const { rowCount } = await db.query(
      `DELETE FROM inbox WHERE ctid IN (SELECT ctid FROM inbox WHERE processed_at < now() - ($1::bigint * interval '1 millisecond') LIMIT $2)`,
      [retentionMs, batch],
    );
    total += rowCount ?? 0;
    if ((rowCount ?? 0) < batch) return total;
  }
  return total;
}
