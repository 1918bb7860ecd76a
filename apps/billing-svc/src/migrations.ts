import { coreMigrations, type Migration } from '@labelflow/service-kit';

// Money columns are capped at 2^53 - 1 so every amount read back is an exact JS number.
export const migrations: readonly Migration[] = [
  ...coreMigrations,
  {
    version: 2,
    name: 'projects, payouts, ledger, billings',
    sql: `
CREATE TABLE projects (
  project_id     uuid        PRIMARY KEY,
  name           text        NOT NULL,
  currency       char(3)     NOT NULL,
  price_per_task bigint      NOT NULL CHECK (price_per_task > 0 AND price_per_task <= 9007199254740991),
  balance        bigint      NOT NULL CHECK (balance >= 0 AND balance <= 9007199254740991),
  version        integer     NOT NULL,
  created_at     timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE payouts (
  annotator_id text        PRIMARY KEY,
  balance      bigint      NOT NULL CHECK (balance >= 0 AND balance <= 9007199254740991),
  updated_at   timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE ledger (
  id           bigserial   PRIMARY KEY,
  project_id   uuid        NOT NULL REFERENCES projects (project_id),
  task_id      uuid,
  attempt      integer,
  kind         text        NOT NULL CHECK (kind IN ('topup', 'debit', 'credit')),
  annotator_id text,
  amount       bigint      NOT NULL CHECK (amount > 0),
  created_at   timestamptz NOT NULL DEFAULT now(),
  -- At most one debit and one credit per task attempt, whatever the code above does.
  UNIQUE (task_id, attempt, kind)
);
CREATE INDEX ledger_project ON ledger (project_id, kind);
CREATE INDEX ledger_annotator ON ledger (annotator_id, id) WHERE annotator_id IS NOT NULL;
CREATE TABLE billings (
  task_id      uuid        NOT NULL,
  attempt      integer     NOT NULL CHECK (attempt >= 1),
  project_id   uuid        NOT NULL,
  annotator_id text        NOT NULL,
  status       text        NOT NULL CHECK (status IN ('completed', 'failed')),
  amount       bigint      NOT NULL CHECK (amount >= 0),
  reason       text,
  created_at   timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (task_id, attempt)
);`,
  },
  {
    version: 3,
    name: 'refunds, reversals and per-task tombstones',
    sql: `
ALTER TABLE ledger DROP CONSTRAINT ledger_kind_check;
ALTER TABLE ledger ADD CONSTRAINT ledger_kind_check CHECK (kind IN ('topup', 'debit', 'credit', 'refund', 'reversal'));
ALTER TABLE billings DROP CONSTRAINT billings_status_check;
ALTER TABLE billings ADD CONSTRAINT billings_status_check CHECK (status IN ('completed', 'failed', 'refunded'));
ALTER TABLE billings ADD COLUMN updated_at timestamptz NOT NULL DEFAULT now();
CREATE TABLE billing_tasks (
  task_id        uuid        PRIMARY KEY,
  latest_attempt integer     NOT NULL DEFAULT 1,
  cancelled_at   timestamptz,
  updated_at     timestamptz NOT NULL DEFAULT now()
);`,
  },
  {
    version: 4,
    name: 'snowflake task ids',
    sql: `
ALTER TABLE ledger ALTER COLUMN task_id TYPE text USING task_id::text;
ALTER TABLE billings ALTER COLUMN task_id TYPE text USING task_id::text;
ALTER TABLE billing_tasks ALTER COLUMN task_id TYPE text USING task_id::text;`,
  },
  {
    version: 5,
    name: 'keyset index for payouts by project',
    // An annotator's entries in one project, in id order: pageLedger reads one such range per
    // project a manager may see. Without a project filter it reads ledger_annotator (version 2).
    sql: `
CREATE INDEX ledger_annotator_project ON ledger (annotator_id, project_id, id) WHERE annotator_id IS NOT NULL;`,
  },
  {
    version: 6,
    name: 'who moved the money',
    // ledger.actor: the person whose decision booked the entry (who topped up, the reviewer whose
    // approval a debit and credit pay for, who cancelled); null only for the system's own (a
    // refund of a superseded attempt) and for entries from before it was recorded.
    sql: `
ALTER TABLE ledger ADD COLUMN actor text;
ALTER TABLE billings ADD COLUMN approved_by text;`,
  },
  {
    version: 7,
    name: 'machine price per task',
    // What a project pays for a task whose approved labels a model submitted (no annotator is paid).
    sql: `
ALTER TABLE projects ADD COLUMN machine_price_per_task bigint NOT NULL DEFAULT 0 CHECK (machine_price_per_task >= 0 AND machine_price_per_task <= 9007199254740991);`,
  },
  {
    version: 8,
    name: 'project versions as bigint',
    // The version moves with every balance change (charge, refund, top-up): an integer would stop a
    // busy project's billing after 2^31 of them (SQLSTATE 22003, not transient: every approval of
    // the project dead-lettered). Exact as a JavaScript number up to 2^53.
    sql: `ALTER TABLE projects ALTER COLUMN version TYPE bigint;`,
  },
  {
    version: 9,
    name: 'payouts per currency',
    // One payout per annotator and currency: a balance that summed projects of different currencies
    // meant nothing. The balances are recomputed from the ledger (credits - reversals), each entry in
    // its project's currency. Rows of 0 without entries are dropped: a billing creates them again.
    // The locks come first, payouts before ledger (the order an older instance writes them in): a
    // credit such an instance has booked but not committed yet is in the ledger the copy reads,
    // never lost between the copy and the DROP. An older billing-svc cannot write the new table
    // (ON CONFLICT (annotator_id) names no constraint of it): stop every one before this runs.
    sql: `
LOCK TABLE payouts, ledger IN EXCLUSIVE MODE;
CREATE TABLE payouts_by_currency (
  annotator_id text        NOT NULL,
  currency     char(3)     NOT NULL,
  balance      bigint      NOT NULL CHECK (balance >= 0 AND balance <= 9007199254740991),
  updated_at   timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (annotator_id, currency)
);
INSERT INTO payouts_by_currency (annotator_id, currency, balance)
  SELECT l.annotator_id, p.currency, sum(CASE WHEN l.kind = 'credit' THEN l.amount ELSE -l.amount END)
  FROM ledger l JOIN projects p ON p.project_id = l.project_id
  WHERE l.kind IN ('credit', 'reversal') AND l.annotator_id IS NOT NULL
  GROUP BY l.annotator_id, p.currency;
DROP TABLE payouts;
ALTER TABLE payouts_by_currency RENAME TO payouts;
ALTER TABLE payouts RENAME CONSTRAINT payouts_by_currency_pkey TO payouts_pkey;
ALTER TABLE payouts RENAME CONSTRAINT payouts_by_currency_balance_check TO payouts_balance_check;`,
  },
];
