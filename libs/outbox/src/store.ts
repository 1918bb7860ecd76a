import type { Queryable } from './types';

export interface OutboxMessage {
  readonly topic: string;
  /** Kafka message key: the task id, so a task's events stay in one partition, in order. */
  readonly key: string;
  readonly eventId: string;
  readonly eventType: string;
  readonly payload: unknown;
  readonly headers?: Readonly<Record<string, string>>;
}

/**
 * Appends messages to the outbox inside the caller's transaction and wakes the relay. NOTIFY is
 * transactional: the relay only hears about rows that committed.
 */
export async function enqueue(tx: Queryable, channel: string, messages: readonly OutboxMessage[]): Promise<void> {
  if (messages.length === 0) return;
  // One round trip with one parameter, whatever the batch: the rows travel as one JSON array (a
  // row per parameter would hit PostgreSQL's 65,535-parameter limit on a large batch, and text
  // arrays of JSON would need every quote in every payload escaped), serialized by one native
  // JSON.stringify. The wake-up rides in the same statement (a CTE that writes always runs). Rows
  // keep their order, so ids follow it.
  const rows = messages.map((m) => ({ e: m.eventId, t: m.topic, k: m.key, y: m.eventType, p: m.payload, h: m.headers ?? {} }));
  await tx.query(
    `WITH appended AS (
       INSERT INTO outbox (event_id, topic, message_key, event_type, payload, headers)
       SELECT m.e, m.t, m.k, m.y, m.p, m.h
       FROM ROWS FROM (jsonb_to_recordset($1::jsonb) AS (e text, t text, k text, y text, p jsonb, h jsonb)) WITH ORDINALITY AS m(e, t, k, y, p, h, n)
       ORDER BY m.n
       RETURNING 1)
     SELECT pg_notify($2, '')`,
    [JSON.stringify(rows), channel],
  );
}
