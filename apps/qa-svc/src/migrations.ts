import { coreMigrations, type Migration } from '@labelflow/service-kit';

export const migrations: readonly Migration[] = [
  ...coreMigrations,
  {
    version: 2,
    name: 'reviews',
    sql: `
CREATE TABLE reviews (
  task_id      uuid        NOT NULL,
  attempt      integer     NOT NULL CHECK (attempt >= 1),
  project_id   uuid        NOT NULL,
  annotator_id text        NOT NULL,
  status       text        NOT NULL,
  reviewer_id  text,
  reason       text,
  opened_at    timestamptz NOT NULL DEFAULT now(),
  decided_at   timestamptz,
  PRIMARY KEY (task_id, attempt)
);
CREATE INDEX reviews_status ON reviews (status, opened_at);`,
  },
  {
    version: 3,
    name: 'review deadlines and close reasons',
    // Reviews opened before the SLA existed get the default SLA (72 h) from their opening.
    sql: `
ALTER TABLE reviews ADD COLUMN deadline_at timestamptz, ADD COLUMN close_reason text;
UPDATE reviews SET deadline_at = opened_at + interval '72 hours' WHERE status = 'pending';
ALTER TABLE reviews ADD CONSTRAINT reviews_close_reason CHECK ((status IN ('revoked', 'voided')) = (close_reason IS NOT NULL));
CREATE INDEX reviews_pending_deadline ON reviews (deadline_at) WHERE status = 'pending';`,
  },
  {
    version: 4,
    name: 'review tasks',
    // One row per task, even one without a review (a tombstone): the newest reopened attempt, the
    // cancellation, and the lock every writer of the task takes first.
    sql: `
CREATE TABLE review_tasks (
  task_id          uuid        PRIMARY KEY,
  reopened_attempt integer     NOT NULL DEFAULT 0 CHECK (reopened_attempt >= 0),
  cancelled_at     timestamptz,
  updated_at       timestamptz NOT NULL DEFAULT now()
);
INSERT INTO review_tasks (task_id) SELECT DISTINCT task_id FROM reviews;`,
  },
  {
    version: 5,
    name: 'snowflake task ids',
    sql: `
ALTER TABLE reviews ALTER COLUMN task_id TYPE text USING task_id::text;
ALTER TABLE review_tasks ALTER COLUMN task_id TYPE text USING task_id::text;`,
  },
  {
    version: 6,
    name: 'keyset indexes for review lists',
    // One ordered range per filter shape pageReviewRows reads: by project, by project and status,
    // and (callers who may see every project) by nothing or by status. The wider status index
    // replaces reviews_status, its prefix. A task's history keeps using the primary key.
    sql: `
CREATE INDEX reviews_project_opened ON reviews (project_id, opened_at, task_id, attempt);
CREATE INDEX reviews_project_status_opened ON reviews (project_id, status, opened_at, task_id, attempt);
CREATE INDEX reviews_opened ON reviews (opened_at, task_id, attempt);
CREATE INDEX reviews_status_opened ON reviews (status, opened_at, task_id, attempt);
DROP INDEX reviews_status;`,
  },
  {
    version: 7,
    name: 'reviews remember a completed billing',
    // Rows of attempts billed before this column existed stay false: nothing recorded which were.
    sql: 'ALTER TABLE reviews ADD COLUMN billed boolean NOT NULL DEFAULT false;',
  },
  {
    version: 8,
    name: 'annotators whose attempt a reopen ended',
    // Four eyes also against a labeller whose labels qa-svc never saw (they arrived after the
    // reopen and were stale). Tasks reopened before this column existed start with none.
    sql: "ALTER TABLE review_tasks ADD COLUMN former_annotators text[] NOT NULL DEFAULT '{}';",
  },
];
