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
  // One round trip with a fixed number of parameters, whatever the batch: the rows travel as
  // arrays (a row per parameter would hit PostgreSQL's 65,535-parameter limit on a large batch)
  // and the wake-up rides in the same statement (a CTE that writes always runs). Rows keep their
  // order, so ids follow it.
  await tx.query(
    `WITH appended AS (
       INSERT INTO outbox (event_id, topic, message_key, event_type, payload, headers)
       SELECT event_id, topic, message_key, event_type, payload, headers
       FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::jsonb[], $6::jsonb[]) WITH ORDINALITY AS m(event_id, topic, message_key, event_type, payload, headers, n)
       ORDER BY n
       RETURNING 1)
     SELECT pg_notify($7, '')`,
    [
      messages.map((m) => m.eventId),
      messages.map((m) => m.topic),
      messages.map((m) => m.key),
      messages.map((m) => m.eventType),
      messages.map((m) => JSON.stringify(m.payload)),
      messages.map((m) => JSON.stringify(m.headers ?? {})),
      channel,
    ],
  );
}
