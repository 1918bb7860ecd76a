import { OutboxError, OutboxErrors } from './errors';
import { RS_BYTE, US, US_BYTE } from './framing';
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
  // One round trip with one parameter, whatever the batch: the rows travel as one text (a row per
  // parameter would hit PostgreSQL's 65,535-parameter limit on a large batch). The wake-up rides in
  // the same statement (a CTE that writes always runs).
  await tx.query(
    `WITH appended AS (${appendRowsSql('$1')})
     SELECT pg_notify($2, '') UNION ALL SELECT pg_notify($3, payload) FROM unnest($4::text[]) AS payload`,
    [serializeOutboxRows(messages), channel, also?.channel ?? channel, also?.payloads ?? []],
  );
}

// eslint-disable-next-line no-control-regex -- matching the two separators is the point
const SEPARATORS = /[\x1e\x1f]/;

const plain = (what: string, value: string): string => {
  if (SEPARATORS.test(value)) throw new OutboxError(OutboxErrors.ROW_INVALID, `an outbox row's ${what} must not contain the ASCII separators U+001E or U+001F: ${JSON.stringify(value.slice(0, 100))}`);
  return value;
};

/**
 * Messages as the one parameter `appendRowsSql` reads: the framed rows' UTF-8 bytes. Each row is
 * encoded straight into one buffer, which node-postgres sends as a binary parameter (for `text`,
 * the bytes as they are). Joining the rows into one JavaScript string, which node-postgres then
 * measured and encoded for the socket, cost about three times as much (7 against 2.3 ms a
 * 1,000-row batch, of which 1.5 ms is JSON.stringify), and left the garbage collector a tree of
 * concatenated strings.
 */
export function serializeOutboxRows(messages: readonly OutboxMessage[]): Buffer {
  let buffer = Buffer.allocUnsafe(Math.max(1024, messages.length * 768));
  let at = 0;
  // Messages often share one headers object (createEmitter gives a batch's events of one type the
  // same): its JSON is written once.
  let lastHeaders: OutboxMessage['headers'] | null = null;
  let headersJson = '';
  for (const m of messages) {
    if (m.headers !== lastHeaders || lastHeaders === null) {
      lastHeaders = m.headers;
      headersJson = JSON.stringify(m.headers ?? {});
    }
    const fields = `${plain('event id', m.eventId)}${US}${plain('topic', m.topic)}${US}${plain('key', m.key)}${US}${plain('event type', m.eventType)}${US}`;
    const payload = JSON.stringify(m.payload);
    // A UTF-16 code unit takes at most 3 UTF-8 bytes. The parts are written one after the other,
    // not joined first: a joined row is one more copy of the payload, as garbage, per message.
    const room = at + (fields.length + headersJson.length + payload.length + 2) * 3;
    if (room > buffer.length) {
      const grown = Buffer.allocUnsafe(Math.max(buffer.length * 2, room));
      buffer.copy(grown, 0, 0, at);
      buffer = grown;
    }
    at += buffer.write(fields, at);
    at += buffer.write(headersJson, at);
    buffer[at++] = US_BYTE;
    at += buffer.write(payload, at);
    buffer[at++] = RS_BYTE;
  }
  // No separator after the last row.
  return buffer.subarray(0, Math.max(0, at - 1));
}

/**
 * The outbox insert, as the body of a data-modifying CTE, for a caller that writes its rows in a
 * statement of its own (e.g. with the rows its insert created, and no round trip between them).
 * `rowsParam` names the parameter holding the rows (`serializeOutboxRows`); `where` may filter
 * them on `m.k` (the message key, a task id), `m.y` (the event type) or `m.e` (the event id). Rows
 * keep their order, so ids follow it. The relay still needs waking: `SELECT pg_notify(<channel>, '')`
 * in the same statement.
 */
export const appendRowsSql = (rowsParam: string, where = 'true'): string => `INSERT INTO outbox (event_id, topic, message_key, event_type, payload, headers)
       SELECT m.e, m.t, m.k, m.y, m.p::json, m.h::json
       FROM (SELECT split_part(r, E'\\x1f', 1) AS e, split_part(r, E'\\x1f', 2) AS t, split_part(r, E'\\x1f', 3) AS k, split_part(r, E'\\x1f', 4) AS y,
                    split_part(r, E'\\x1f', 5) AS h, split_part(r, E'\\x1f', 6) AS p, n
             FROM unnest(string_to_array(${rowsParam}::text, E'\\x1e')) WITH ORDINALITY AS a(r, n)) AS m
       WHERE ${where}
       ORDER BY m.n
       RETURNING 1`;

/**
 * The `topic` of a bundle row: its messages name their own. It is no valid Kafka topic name, on
 * purpose: a relay from before bundles would send the row as one message (its `payload`, `null`)
 * and mark it published, losing the bundle's messages. The broker refuses that send instead
 * (INVALID_TOPIC_EXCEPTION), so such a relay publishes nothing from there on and retries, without
 * marking anything, until an upgraded relay leads.
 */
export const BUNDLE_TOPIC = '(bundle)';

/**
 * Most frame bytes per bundle row. A larger bundle goes into several rows, in order. Kept under
 * V8's large-object size (128 KiB, which a string of non-Latin-1 text reaches at 64 KiB): the
 * relay reads each bundle as one string, and large objects are only freed by a full GC. About 85
 * TaskCreated, so a row's fixed costs are still shared a hundredfold.
 */
export const DEFAULT_MAX_BUNDLE_BYTES = 48 * 1024;

/**
 * `appendRowsSql` for bundles: the rows that pass `where` (on `m.k`, `m.y` or `m.e`, as there) go
 * into as few outbox rows as `maxBundleBytes` allows (consecutive frames, each row's frames at most
 * that many bytes unless one frame alone is larger), in order, their frames in `messages`
 * (outboxBundlesMigrationSql). A row's event id, key and event type are its first message's, read
 * off the front of its frames, and its topic is `BUNDLE_TOPIC`. Nothing is appended when no row
 * passes. For a writer that emits many events in one transaction: the relay publishes them in
 * order, as it would as many rows, for a few rows' cost to PostgreSQL.
 */
export const appendBundleSql = (rowsParam: string, where = 'true', maxBundleBytes = DEFAULT_MAX_BUNDLE_BYTES): string => `INSERT INTO outbox (event_id, topic, message_key, event_type, payload, headers, messages)
       SELECT split_part(b.f, E'\\x1f', 1), '${BUNDLE_TOPIC}', split_part(b.f, E'\\x1f', 3), split_part(b.f, E'\\x1f', 4), 'null'::json, '{}'::json, b.messages
       FROM (SELECT a.chunk, a.messages, split_part(a.messages, E'\\x1e', 1) AS f
             FROM (SELECT c.chunk, string_agg(c.r, E'\\x1e' ORDER BY c.n) AS messages
                   FROM (SELECT m.r, m.n, (sum(octet_length(m.r)) OVER (ORDER BY m.n) - octet_length(m.r)) / ${Math.max(1, Math.floor(maxBundleBytes))} AS chunk
                         FROM (SELECT r, split_part(r, E'\\x1f', 1) AS e, split_part(r, E'\\x1f', 3) AS k, split_part(r, E'\\x1f', 4) AS y, n
                               FROM unnest(string_to_array(${rowsParam}::text, E'\\x1e')) WITH ORDINALITY AS a(r, n)) AS m
                         WHERE ${where}) AS c
                   GROUP BY c.chunk) AS a) AS b
       ORDER BY b.chunk
       RETURNING 1`;

/**
 * `enqueue` for many messages at once, as bundle rows (`appendBundleSql`), in the caller's
 * transaction, and wakes the relay. Kafka receives the same messages, in the same order.
 */
export async function enqueueBundle(tx: Queryable, channel: string, messages: readonly OutboxMessage[], maxBundleBytes = DEFAULT_MAX_BUNDLE_BYTES): Promise<void> {
  if (messages.length === 0) return;
  await tx.query(`WITH appended AS (${appendBundleSql('$1', 'true', maxBundleBytes)}) SELECT pg_notify($2, '')`, [serializeOutboxRows(messages), channel]);
}

/**
 * Seconds since the oldest row still waiting for the relay was written (0 when none waits): how
 * far behind Kafka the service's committed state is. Other services judge deadlines by what they
 * have read from Kafka, so a relay further behind than a deadline's grace lets one fire on an
 * event that was committed in time. Parked rows (`failed_at`) are not waiting; they have
 * `outbox_failed_total`. Two index lookups, whatever the backlog.
 */
export async function oldestPendingAgeSeconds(db: Queryable): Promise<number> {
  const { rows } = await db.query<{ age: number | null }>(
    'SELECT extract(epoch FROM clock_timestamp() - created_at)::float8 AS age FROM outbox WHERE id = (SELECT min(id) FROM outbox_pending)',
  );
  return Math.max(0, rows[0]?.age ?? 0);
}
