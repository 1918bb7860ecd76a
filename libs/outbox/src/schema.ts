/**
 * The outbox table as first shipped, for a service's own migrations. Rows are written in the same
 * transaction as the state change that produced them and published afterwards by the relay, in id
 * order. A migration that already ran keeps its SQL: later steps come as steps of their own.
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
CREATE INDEX IF NOT EXISTS outbox_unpublished ON outbox (id) WHERE published_at IS NULL;
CREATE INDEX IF NOT EXISTS outbox_published_at ON outbox (published_at) WHERE published_at IS NOT NULL;
`;

/**
 * Idempotent step: rows the relay gave up on. `failed_at` is set (and `published_at` stays NULL)
 * when Kafka refuses a row as too large for its topic on its own, and for every later row of the
 * same `message_key`, which is held behind it so that a task's events never overtake each other.
 * The relay skips such rows; clearing `failed_at` hands them back to it. The index serves the
 * relay's "is an earlier row of this key parked?" lookup and is empty while nothing has failed.
 *
 * Its own migration step (service-kit's core version 104): until it runs, the relay publishes as
 * before and cannot park a row (see the README).
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

/** The whole outbox schema in one go, for a new database: the table and every later step, each idempotent. */
export const outboxMigrationSql = outboxTableSql + outboxFailedRowsMigrationSql + outboxLeanRowsMigrationSql;
