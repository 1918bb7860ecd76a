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

/** NOTIFYs of the caller's own (one per payload on `channel`) that ride with the outbox insert. */
export interface Notification {
  readonly channel: string;
  readonly payloads: readonly string[];
}

/** Sends a notification by itself, in the caller's transaction (NOTIFY waits for the COMMIT). */
export async function notify(tx: Queryable, notification: Notification): Promise<void> {
  if (notification.payloads.length === 0) return;
  await tx.query('SELECT pg_notify($1, payload) FROM unnest($2::text[]) AS payload', [notification.channel, notification.payloads]);
}

/**
 * Appends messages to the outbox inside the caller's transaction and wakes the relay. NOTIFY is
 * transactional: the relay only hears about rows that committed. `also`: the caller's own
 * notification (e.g. "these tasks changed"), sent in the same statement instead of one more.
 */
export async function enqueue(tx: Queryable, channel: string, messages: readonly OutboxMessage[], also?: Notification): Promise<void> {
  if (messages.length === 0) return also ? notify(tx, also) : undefined;
  // One round trip with one parameter, whatever the batch: the rows travel as one JSON array (a
  // row per parameter would hit PostgreSQL's 65,535-parameter limit on a large batch, and text
  // arrays of JSON would need every quote in every payload escaped), serialized by one native
  // JSON.stringify. The wake-up rides in the same statement (a CTE that writes always runs).
  await tx.query(
    `WITH appended AS (${appendRowsSql('$1')})
     SELECT pg_notify($2, '') UNION ALL SELECT pg_notify($3, payload) FROM unnest($4::text[]) AS payload`,
    [JSON.stringify(messages.map(rowOf)), channel, also?.channel ?? channel, also?.payloads ?? []],
  );
}

/** One message as the JSON of its outbox row, for a caller that serializes its rows ahead of the statement that appends them (`appendRowsSql`). */
export const serializeOutboxRow = (message: OutboxMessage): string => JSON.stringify(rowOf(message));

const rowOf = (m: OutboxMessage) => ({ e: m.eventId, t: m.topic, k: m.key, y: m.eventType, p: m.payload, h: m.headers ?? {} });

/**
 * The outbox insert, as the body of a data-modifying CTE, for a caller that writes its rows in a
 * statement of its own (e.g. with the rows its insert created, and no round trip between them).
 * `rowsParam` names the parameter holding the rows as one JSON array (`serializeOutboxRow`
 * objects, or `[…]` of them); `where` may filter them on `m.k` (the message key, a task id),
 * `m.y` (the event type) or `m.e` (the event id). Rows keep their order, so ids follow it.
 * The relay still needs waking: `SELECT pg_notify(<channel>, '')` in the same statement.
 */
export const appendRowsSql = (rowsParam: string, where = 'true'): string => `INSERT INTO outbox (event_id, topic, message_key, event_type, payload, headers)
       SELECT m.e, m.t, m.k, m.y, m.p, m.h
       FROM ROWS FROM (json_to_recordset(${rowsParam}::json) AS (e text, t text, k text, y text, p json, h json)) WITH ORDINALITY AS m(e, t, k, y, p, h, n)
       WHERE ${where}
       ORDER BY m.n
       RETURNING 1`;
