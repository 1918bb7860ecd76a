import { coreMigrations, type Migration } from '@labelflow/service-kit';

export const migrations: readonly Migration[] = [
  ...coreMigrations,
  {
    version: 2,
    name: 'assignments and labels',
    sql: `
CREATE TABLE assignments (
  task_id      uuid        PRIMARY KEY,
  project_id   uuid        NOT NULL,
  attempt      integer     NOT NULL CHECK (attempt >= 1),
  annotator_id text        NOT NULL,
  version      integer     NOT NULL,
  updated_at   timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE labels (
  task_id      uuid        NOT NULL,
  attempt      integer     NOT NULL CHECK (attempt >= 1),
  annotator_id text        NOT NULL,
  annotations  jsonb       NOT NULL,
  status       text        NOT NULL,
  submitted_at timestamptz NOT NULL DEFAULT now(),
  updated_at   timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (task_id, attempt)
);`,
  },
  {
    version: 3,
    name: 'assignments may be unclaimed',
    // A reopened task keeps its row (and so its newest attempt) with nobody assigned until claimed.
    sql: 'ALTER TABLE assignments ALTER COLUMN annotator_id DROP NOT NULL;',
  },
  {
    version: 4,
    name: 'leases, cancellation tombstones and voided labels',
    // cancelled_at makes the task's row a tombstone: TaskCancelled creates it even for a task never
    // seen, so later events for the task are ignored. A voided label records which step undid it.
    sql: `
ALTER TABLE assignments ADD COLUMN lease_expires_at timestamptz, ADD COLUMN cancelled_at timestamptz;
ALTER TABLE labels ADD COLUMN void_reason text;
ALTER TABLE labels ADD CONSTRAINT labels_void_reason CHECK ((status = 'voided') = (void_reason IS NOT NULL));`,
  },
  {
    version: 5,
    name: 'snowflake task ids',
    sql: `
ALTER TABLE assignments ALTER COLUMN task_id TYPE text USING task_id::text;
ALTER TABLE labels ALTER COLUMN task_id TYPE text USING task_id::text;`,
  },
  {
    version: 6,
    name: 'machine pre-labels and prelabel policies',
    // One proposal per (task, attempt, model name + version): the dedup key of PrelabelProposed. A
    // proposal may arrive before label-svc knows the task, so nothing references assignments.
    sql: `
CREATE TABLE prelabels (
  task_id       text        NOT NULL,
  attempt       integer     NOT NULL CHECK (attempt >= 1),
  model_name    text        NOT NULL,
  model_version text        NOT NULL,
  proposal_id   text        NOT NULL,
  project_id    uuid        NOT NULL,
  annotations   jsonb       NOT NULL,
  proposed_at   timestamptz NOT NULL,
  received_at   timestamptz NOT NULL DEFAULT now(),
  auto_submitted boolean    NOT NULL DEFAULT false,
  PRIMARY KEY (task_id, attempt, model_name, model_version)
);
CREATE TABLE prelabel_policies (
  project_id     uuid             PRIMARY KEY,
  auto_submit    boolean          NOT NULL,
  min_confidence double precision NOT NULL CHECK (min_confidence >= 0 AND min_confidence <= 1),
  model_name     text,
  model_version  text,
  updated_by     text             NOT NULL,
  updated_at     timestamptz      NOT NULL DEFAULT now(),
  CHECK ((model_name IS NULL) = (model_version IS NULL))
);`,
  },
  {
    version: 7,
    name: 'labels remember a completed billing',
    // Rows of attempts billed before this column existed stay false: nothing recorded which were.
    sql: 'ALTER TABLE labels ADD COLUMN billed boolean NOT NULL DEFAULT false;',
  },
  {
    version: 8,
    name: 'pre-labels keyed by project too',
    // A proposal naming another project than the task's, kept before label-svc knew the task, must
    // not take the row of the one addressed right (the dedup key names the project as well).
    sql: `
ALTER TABLE prelabels DROP CONSTRAINT prelabels_pkey;
ALTER TABLE prelabels ADD PRIMARY KEY (task_id, attempt, project_id, model_name, model_version);`,
  },
];
