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
  const values: unknown[] = [];
  const rows = messages.map((m, i) => {
    values.push(m.eventId, m.topic, m.key, m.eventType, JSON.stringify(m.payload), JSON.stringify(m.headers ?? {}));
    const b = i * 6;
    return `($${b + 1}, $${b + 2}, $${b + 3}, $${b + 4}, $${b + 5}::jsonb, $${b + 6}::jsonb)`;
  });
  values.push(channel);
  // One round trip: the rows and the wake-up travel in one statement (a CTE that writes always runs).
  await tx.query(
    `WITH appended AS (INSERT INTO outbox (event_id, topic, message_key, event_type, payload, headers) VALUES ${rows.join(', ')} RETURNING 1)
     SELECT pg_notify($${values.length}, '')`,
    values,
  );
}
