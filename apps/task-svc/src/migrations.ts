import { coreMigrations, type Migration } from '@labelflow/service-kit';

export const migrations: readonly Migration[] = [
  ...coreMigrations,
  {
    version: 2,
    name: 'tasks',
    sql: `
CREATE TABLE tasks (
  task_id    uuid        PRIMARY KEY,
  project_id uuid        NOT NULL,
  title      text        NOT NULL,
  data_uri   text        NOT NULL,
  status     text        NOT NULL,
  attempt    integer     NOT NULL CHECK (attempt >= 1),
  assignee   text,
  version    integer     NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now(),
  updated_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX tasks_project_status ON tasks (project_id, status);`,
  },
  {
    version: 3,
    name: 'assignment leases, failure and cancellation reasons',
    sql: `
ALTER TABLE tasks ADD COLUMN lease_expires_at timestamptz, ADD COLUMN reason text;
CREATE INDEX tasks_lease_due ON tasks (lease_expires_at) WHERE status = 'assigned';`,
  },
  {
    version: 4,
    name: 'snowflake task ids and per-project task numbers',
    sql: `
ALTER TABLE tasks ALTER COLUMN task_id TYPE text USING task_id::text;
ALTER TABLE tasks ADD COLUMN task_number text;
CREATE UNIQUE INDEX tasks_project_number ON tasks (project_id, task_number) WHERE task_number IS NOT NULL;
CREATE TABLE project_keys (
  project_id  uuid PRIMARY KEY,
  project_key text NOT NULL
);`,
  },
  {
    version: 5,
    name: 'keyset indexes for task lists',
    // One ordered range per filter shape listTasks reads: by project, by project and status, and
    // (callers who may see every project) by nothing or by status. The (project_id, status) index
    // is a prefix of the wider one, so it goes.
    sql: `
CREATE INDEX tasks_project_created ON tasks (project_id, created_at, task_id);
CREATE INDEX tasks_project_status_created ON tasks (project_id, status, created_at, task_id);
CREATE INDEX tasks_created ON tasks (created_at, task_id);
CREATE INDEX tasks_status_created ON tasks (status, created_at, task_id);
DROP INDEX tasks_project_status;`,
  },
  {
    version: 6,
    name: 'bulk imports: external ids and import jobs',
    // external_id is the client's business key: a re-uploaded line meets the unique index and
    // creates nothing. Tasks made one POST at a time have none, hence the partial index.
    // An import job is named by its client (import_id) within a project, so two projects can never
    // learn of each other's jobs. position/prefix_sha256 say how much of the file the committed
    // batches covered, so a re-upload resumes after it; owner/lease_expires_at say which upload
    // holds the job (a crashed instance's hold lapses with its lease).
    sql: `
ALTER TABLE tasks ADD COLUMN external_id text;
CREATE UNIQUE INDEX tasks_project_external_id ON tasks (project_id, external_id) WHERE external_id IS NOT NULL;
CREATE TABLE imports (
  project_id       uuid        NOT NULL,
  import_id        uuid        NOT NULL,
  created_by       text        NOT NULL,
  status           text        NOT NULL CHECK (status IN ('running', 'completed', 'interrupted')),
  position         bigint      NOT NULL DEFAULT 0 CHECK (position >= 0),
  prefix_sha256    text        NOT NULL,
  lines            bigint      NOT NULL DEFAULT 0 CHECK (lines >= 0),
  created          bigint      NOT NULL DEFAULT 0 CHECK (created >= 0),
  already_present  bigint      NOT NULL DEFAULT 0 CHECK (already_present >= 0),
  rejected         bigint      NOT NULL DEFAULT 0 CHECK (rejected >= 0),
  errors           jsonb       NOT NULL DEFAULT '[]',
  errors_truncated boolean     NOT NULL DEFAULT false,
  uploads          integer     NOT NULL DEFAULT 1,
  owner            uuid,
  lease_expires_at timestamptz,
  started_at       timestamptz NOT NULL DEFAULT now(),
  updated_at       timestamptz NOT NULL DEFAULT now(),
  completed_at     timestamptz,
  PRIMARY KEY (project_id, import_id)
);`,
  },
  {
    version: 7,
    name: 'reviewers who rejected an attempt',
    // Tasks rejected before this migration start with nobody listed: their reviewers could still
    // claim the rework, as before.
    sql: `ALTER TABLE tasks ADD COLUMN rejected_by text[] NOT NULL DEFAULT '{}';`,
  },
  {
    version: 8,
    name: 'who held the attempts whose labels were submitted',
    // Rows from before it cannot tell who held their earlier attempts: '' stands for someone
    // unknown, never a claimant, so no reviewer-annotator claims rework whose labels they could read.
    sql: `ALTER TABLE tasks ADD COLUMN labelled_by text[] NOT NULL DEFAULT '{}';
UPDATE tasks SET labelled_by = CASE WHEN attempt > 1 THEN ARRAY['']::text[] ELSE ARRAY[coalesce(assignee, '')]::text[] END
 WHERE attempt > 1 OR status IN ('labelled', 'in_review', 'approved', 'completed', 'failed');`,
  },
];
