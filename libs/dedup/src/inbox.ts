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
  recentKeys(windowMs: number, limit: number): Promise<DedupKey[]>;
}

export function inboxReader(db: Queryable): InboxReader {
  return {
    db,
    async recentKeys(windowMs, limit) {
      const { rows } = await db.query<{ task_id: string; event_type: string; attempt: number }>(
        `SELECT task_id, event_type, attempt FROM inbox WHERE processed_at > now() - ($1::bigint * interval '1 millisecond')
         ORDER BY processed_at DESC LIMIT $2`,
        [windowMs, limit],
      );
      return rows.map((r) => ({ taskId: r.task_id, eventType: r.event_type, attempt: r.attempt }));
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
 */
export async function pruneInbox(db: Queryable, retentionMs: number, batch = 10_000): Promise<number> {
  let total = 0;
  for (;;) {
    const { rowCount } = await db.query(
      `DELETE FROM inbox WHERE ctid IN (SELECT ctid FROM inbox WHERE processed_at < now() - ($1::bigint * interval '1 millisecond') LIMIT $2)`,
      [retentionMs, batch],
    );
    total += rowCount ?? 0;
    if ((rowCount ?? 0) < batch) return total;
  }
}
