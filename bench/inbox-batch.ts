// Bench-only helper: @labelflow/dedup has no batch insert for the inbox (recordInInbox is one row),
// so the batched PostgreSQL contender uses this. It is the same statement as recordInInbox, made
// multi-row: one INSERT of B rows from unnest() arrays, ON CONFLICT DO NOTHING, RETURNING the keys
// that were new. Run it inside the caller's transaction, like recordInInbox.
import { formatKey, type InboxEntry, type Queryable } from '@labelflow/dedup';

/** Inserts all entries in one statement; returns the formatted keys that were fresh (inserted). */
export async function recordBatchInInbox(tx: Queryable, entries: readonly InboxEntry[]): Promise<Set<string>> {
  if (entries.length === 0) return new Set();
  const { rows } = await tx.query<{ task_id: string; event_type: string; attempt: number }>(
    `INSERT INTO inbox (task_id, event_type, attempt, event_id, source)
     SELECT * FROM unnest($1::uuid[], $2::text[], $3::int[], $4::uuid[], $5::text[])
     ON CONFLICT (task_id, event_type, attempt) DO NOTHING
     RETURNING task_id, event_type, attempt`,
    [entries.map((e) => e.taskId), entries.map((e) => e.eventType), entries.map((e) => e.attempt), entries.map((e) => e.eventId), entries.map((e) => e.source)],
  );
  return new Set(rows.map((r) => formatKey({ taskId: r.task_id, eventType: r.event_type, attempt: r.attempt })));
}
