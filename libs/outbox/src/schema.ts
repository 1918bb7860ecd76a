/**
 * The outbox table, for a service's own migrations. Rows are written in the same transaction as the
 * state change that produced them and published afterwards by the relay, in id order.
 */
export const outboxMigrationSql = `
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
