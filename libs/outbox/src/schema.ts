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

/** How many rows wait for the relay (parked rows are not among them): the check a test or a tool runs for "drained". */
export const countPendingSql = 'SELECT count(*)::int AS n FROM outbox_pending';

/** The whole outbox schema in one go, for a new database: the table and every later step, each idempotent. */
export const outboxMigrationSql = outboxTableSql + outboxFailedRowsMigrationSql + outboxLeanRowsMigrationSql + outboxPendingMigrationSql;
