/**
 * The outbox table as first shipped, for a service's own migrations. Rows are written in the same
 * transaction as the state change that produced them and published afterwards by the relay, in id
 * order. A migration that already ran keeps its SQL: later steps come as steps of their own
 * (`published_at` below is dropped by the pending-rows step).
 */
export const outboxTableSql = `
CREATE TABLE IF NOT EXISTS outbox (
  id            bigserial   PRIMARY KEY,
  event_id      text        NOT NULL UNIQUE,
  topic         text        NOT NULL,
  message_key   text        NOT NULL,
  event_type    text        NOT NULL,
  payload       jsonb       NOT NULL,
  headers       jsonb       NOT NULL DEFAULT '{}'::jsonb,
  created_at    timestamptz NOT NULL DEFAULT now(),
  published_at  timestamptz
);
-- Guarded so that the whole schema can run again once the pending-rows step dropped the column.
DO $$
BEGIN
  IF EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = 'outbox'::regclass AND attname = 'published_at' AND NOT attisdropped) THEN
    CREATE INDEX IF NOT EXISTS outbox_unpublished ON outbox (id) WHERE published_at IS NULL;
    CREATE INDEX IF NOT EXISTS outbox_published_at ON outbox (published_at) WHERE published_at IS NOT NULL;
  END IF;
END $$;
`;

/**
 * Idempotent step: rows the relay gave up on. `failed_at` is set (and the row is not published)
 * when Kafka refuses a row as too large for its topic on its own, and for every later row of the
 * same `message_key`, which is held behind it so that a task's events never overtake each other.
 * The relay skips such rows; clearing `failed_at` hands them back to it. The index serves the
 * relay's "is an earlier row of this key parked?" lookup and is empty while nothing has failed.
 *
 * Its own migration step (service-kit's core version 104), which the pending-rows step (106), and
 * so the relay, needs.
 */
export const outboxFailedRowsMigrationSql = `
ALTER TABLE outbox ADD COLUMN IF NOT EXISTS failed_at timestamptz;
ALTER TABLE outbox ADD COLUMN IF NOT EXISTS failure text;
CREATE INDEX IF NOT EXISTS outbox_failed ON outbox (message_key, id) WHERE failed_at IS NOT NULL;
`;

/**
 * Idempotent step: leaner rows, for what every row costs PostgreSQL (service-kit's core version 105).
 * - The payload and headers are stored as `json`, the text the service wrote, not parsed into
 *   `jsonb`: nothing queries inside them on the hot path, and the relay sends the text as it is
 *   (printing jsonb back to text cost it 2-3 µs a row, and added a space after every colon).
 *   `->` and `->>` work on json as they did.
 * - No unique index on event_id: event ids are Snowflake ids from leased worker ids (@labelflow/idgen),
 *   unique by construction, and no statement looks a row up by them. The index cost an entry at
 *   every insert and again at every mark (an UPDATE of published_at is never HOT: the partial
 *   indexes' predicates name it), about 15 % of both.
 */
export const outboxLeanRowsMigrationSql = `
ALTER TABLE outbox DROP CONSTRAINT IF EXISTS outbox_event_id_key;
ALTER TABLE outbox ALTER COLUMN headers DROP DEFAULT;
ALTER TABLE outbox ALTER COLUMN payload TYPE json USING payload::json, ALTER COLUMN headers TYPE json USING headers::json;
ALTER TABLE outbox ALTER COLUMN headers SET DEFAULT '{}'::json;
`;

/** A trigger on the outbox and its function, replaced if they exist (CREATE OR REPLACE TRIGGER needs PostgreSQL 14). */
const outboxTrigger = (name: string, body: string, when: string) => `
CREATE OR REPLACE FUNCTION ${name}() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  ${body}
  RETURN NULL;
END $$;
DROP TRIGGER IF EXISTS ${name} ON outbox;
CREATE TRIGGER ${name} ${when} EXECUTE FUNCTION ${name}();`;

/**
 * Idempotent step: pending rows listed apart (service-kit's core version 106). A row is pending
 * while its id is in `outbox_pending`; the relay deletes the id once Kafka acknowledged the row,
 * and `published_at` is gone. Marking a row published used to rewrite the whole row (an UPDATE of
 * `published_at`, never HOT: the partial indexes named it), which cost PostgreSQL about as much
 * as writing it had; deleting an 8-byte id from a small table costs a fraction of that, leaves no
 * dead wide rows for VACUUM, and the relay walks a table that holds only what it has to send.
 *
 * Triggers keep the list: each INSERT into the outbox adds its rows' ids (one statement-level
 * trigger per INSERT, however many rows), a DELETE or TRUNCATE takes them off, and clearing a
 * parked row's `failed_at` puts it back (the release described in the README). To publish rows
 * again, insert their ids: `INSERT INTO outbox_pending (id) SELECT id FROM outbox WHERE … ON CONFLICT DO NOTHING`.
 * Rows pending when the step runs are carried over; published rows are not.
 */
export const outboxPendingMigrationSql = `
CREATE TABLE IF NOT EXISTS outbox_pending (id bigint PRIMARY KEY);
${outboxTrigger('outbox_pending_add', 'INSERT INTO outbox_pending (id) SELECT id FROM appended;', 'AFTER INSERT ON outbox REFERENCING NEW TABLE AS appended FOR EACH STATEMENT')}
${outboxTrigger('outbox_pending_forget', 'DELETE FROM outbox_pending p USING removed r WHERE p.id = r.id;', 'AFTER DELETE ON outbox REFERENCING OLD TABLE AS removed FOR EACH STATEMENT')}
${outboxTrigger('outbox_pending_clear', 'DELETE FROM outbox_pending;', 'AFTER TRUNCATE ON outbox FOR EACH STATEMENT')}
${outboxTrigger(
  'outbox_pending_release',
  'INSERT INTO outbox_pending (id) VALUES (NEW.id) ON CONFLICT DO NOTHING;',
  'AFTER UPDATE OF failed_at ON outbox FOR EACH ROW WHEN (OLD.failed_at IS NOT NULL AND NEW.failed_at IS NULL)',
)}
DO $$
BEGIN
  IF EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = 'outbox'::regclass AND attname = 'published_at' AND NOT attisdropped) THEN
    INSERT INTO outbox_pending (id) SELECT id FROM outbox WHERE published_at IS NULL AND failed_at IS NULL ON CONFLICT DO NOTHING;
    -- Its two partial indexes go with it.
    ALTER TABLE outbox DROP COLUMN published_at;
  END IF;
END $$;
`;

/**
 * Idempotent step: bundles (service-kit's core version 107). A bundle is one outbox row that
 * carries many messages, in `messages`: the frames of `serializeOutboxRows` (event id, topic, key,
 * event type, headers and payload, US between fields, RS between messages), in order. Its event
 * id, key and event type are its first message's; its topic is `BUNDLE_TOPIC`, which the broker
 * refuses, so that a relay from before this step stops at a bundle instead of mis-sending it. A writer that emits a thousand events in one transaction
 * (a bulk import's TaskCreated) pays PostgreSQL a row, a pending id, a read and a mark per bundle
 * of about 85 (appendBundleSql's byte limit) instead of per event: in bench:ingest the outbox rows and their relay cost PostgreSQL
 * more than the tasks themselves. The relay sends a bundle's messages in order, in as many sends
 * as its batch limits need, and marks the row once the last one is acknowledged.
 *
 * `messages` is compressed with lz4 where the server has it (pglz otherwise): a bundle of 1,000
 * TaskCreated frames shrinks from 575 to 53 kB, a tenth of the TOAST chunks and WAL, for less CPU
 * than that saves (bench:ingest against uncompressed storage: PostgreSQL 19 against 21 ms). The relay's read takes a
 * bundle's size from its TOAST pointer, without decompressing it.
 *
 * `outbox_messages` lists every message, a bundle's one per frame, with the columns of a plain
 * row: what tools and tests that look for events in the outbox read.
 */
export const outboxBundlesMigrationSql = `
ALTER TABLE outbox ADD COLUMN IF NOT EXISTS messages text;
DO $$
BEGIN
  ALTER TABLE outbox ALTER COLUMN messages SET COMPRESSION lz4;
EXCEPTION WHEN feature_not_supported OR invalid_parameter_value THEN
  NULL;
END $$;
CREATE OR REPLACE VIEW outbox_messages AS
  SELECT o.id, o.event_id, o.topic, o.message_key, o.event_type, o.payload, o.headers, o.created_at, o.failed_at, o.failure, 1::bigint AS seq
  FROM outbox o WHERE o.messages IS NULL
  UNION ALL
  SELECT o.id, split_part(m.r, E'\\x1f', 1), split_part(m.r, E'\\x1f', 2), split_part(m.r, E'\\x1f', 3), split_part(m.r, E'\\x1f', 4),
         split_part(m.r, E'\\x1f', 6)::json, split_part(m.r, E'\\x1f', 5)::json, o.created_at, o.failed_at, o.failure, m.n AS seq
  FROM outbox o CROSS JOIN LATERAL unnest(string_to_array(o.messages, E'\\x1e')) WITH ORDINALITY AS m(r, n) WHERE o.messages IS NOT NULL;
`;

/** How many rows wait for the relay (parked rows are not among them): the check a test or a tool runs for "drained". */
export const countPendingSql = 'SELECT count(*)::int AS n FROM outbox_pending';

/** The whole outbox schema in one go, for a new database: the table and every later step, each idempotent. */
// The view reads columns that the lean-rows step alters, which PostgreSQL refuses while a view
// uses them: a rerun on a migrated outbox drops it first, and the bundles step makes it again.
export const outboxMigrationSql = 'DROP VIEW IF EXISTS outbox_messages;' + outboxTableSql + outboxFailedRowsMigrationSql + outboxLeanRowsMigrationSql + outboxPendingMigrationSql + outboxBundlesMigrationSql;
