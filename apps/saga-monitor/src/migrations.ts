import { coreMigrations, type Migration } from '@labelflow/service-kit';

export const migrations: readonly Migration[] = [
  ...coreMigrations,
  {
    version: 2,
    name: 'saga timelines and watches',
    // One row per task (also the lock every writer of the task takes first), every event the
    // monitor consumed (idempotent on the event id), the steps it waits for and the notices its
    // commits leave for the metrics, logs and webhooks (drained after the commit).
    sql: `
CREATE TABLE sagas (
  task_id            text        PRIMARY KEY,
  project_id         uuid        NOT NULL,
  task_number        text,
  title              text,
  attempt            integer     NOT NULL CHECK (attempt >= 1),
  last_event_type    text        NOT NULL,
  outcome            text        CHECK (outcome IN ('completed', 'failed', 'cancelled')),
  first_event_at     timestamptz NOT NULL,
  last_event_at      timestamptz NOT NULL,
  events             integer     NOT NULL DEFAULT 0,
  duplicates_dropped integer     NOT NULL DEFAULT 0,
  updated_at         timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX sagas_task_number ON sagas (upper(task_number)) WHERE task_number IS NOT NULL;
CREATE INDEX sagas_project_last ON sagas (project_id, last_event_at DESC);
CREATE INDEX sagas_last ON sagas (last_event_at DESC);

CREATE TABLE saga_events (
  event_id     text        PRIMARY KEY,
  task_id      text        NOT NULL,
  project_id   uuid        NOT NULL,
  type         text        NOT NULL,
  version      integer     NOT NULL,
  attempt      integer     NOT NULL,
  producer     text        NOT NULL,
  occurred_at  timestamptz NOT NULL,
  consumed_at  timestamptz NOT NULL,
  trace_id     text,
  causation_id text,
  payload      jsonb       NOT NULL
);
CREATE INDEX saga_events_task ON saga_events (task_id, occurred_at, event_id);

CREATE TABLE saga_watches (
  task_id    text        NOT NULL,
  step       text        NOT NULL,
  attempt    integer     NOT NULL,
  since      timestamptz NOT NULL,
  due_at     timestamptz NOT NULL,
  alerted_at timestamptz,
  PRIMARY KEY (task_id, step, attempt)
);
CREATE INDEX saga_watches_due ON saga_watches (due_at) WHERE alerted_at IS NULL;
CREATE INDEX saga_watches_alerting ON saga_watches (step) WHERE alerted_at IS NOT NULL;

CREATE TABLE saga_notices (
  id         bigserial   PRIMARY KEY,
  kind       text        NOT NULL,
  body       jsonb       NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now()
);`,
  },
  {
    version: 3,
    name: 'dead letters',
    // What the services' consumers dead-lettered, read from their DLQ topics (idempotent on the
    // message's coordinates), so a timeline shows the messages its task lost on the way.
    sql: `
CREATE TABLE dead_letters (
  topic       text        NOT NULL,
  partition   integer     NOT NULL,
  "offset"    bigint      NOT NULL,
  service     text        NOT NULL,
  task_id     text,
  event_id    text,
  event_type  text,
  code        text        NOT NULL,
  reason      text        NOT NULL,
  source      text,
  failed_at   timestamptz,
  recorded_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (topic, partition, "offset")
);
CREATE INDEX dead_letters_task ON dead_letters (task_id) WHERE task_id IS NOT NULL;`,
  },
  {
    version: 4,
    name: 'webhook posts waiting',
    // An alert's webhook post, queued in the statement that takes its notice, gone once the
    // receiver took it or it was given up: a crash between the two posts it after the restart.
    // The lease keeps two instances from posting one row at once; alert_key keeps one alert's
    // posts in order (a resolved never before its firing).
    sql: `
CREATE TABLE saga_webhooks (
  id           bigint      PRIMARY KEY,
  alert_key    text        NOT NULL,
  body         jsonb       NOT NULL,
  leased_until timestamptz,
  created_at   timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX saga_webhooks_alert ON saga_webhooks (alert_key, id);`,
  },
  {
    version: 5,
    name: 'dead letters: the project their body names',
    // A letter's key ties it to a task, but whoever can write to a topic chooses the key: the
    // project its readable body names decides whose timeline shows what it says.
    sql: `ALTER TABLE dead_letters ADD COLUMN project_id text;`,
  },
];
