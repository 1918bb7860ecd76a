import type pg from 'pg';
import { inboxMigrationSql } from '@labelflow/dedup';
import { idempotencyMigrationSql } from '@labelflow/idempotency';
import { idgenLastIssuedSql, idgenMigrationSql } from '@labelflow/idgen';
import { outboxBundlesMigrationSql, outboxFailedRowsMigrationSql, outboxLeanRowsMigrationSql, outboxPendingMigrationSql, outboxTableSql } from '@labelflow/outbox';
import { ServiceKitError, ServiceKitErrors } from './errors';

export interface Migration {
  /** Strictly increasing; never renumber or edit a migration that has shipped. */
  readonly version: number;
  readonly name: string;
  readonly sql: string;
}

// Any constant works: it only has to be the same for every instance of every service.
const MIGRATION_LOCK = 72_817_001;

/**
 * Applies pending migrations in version order, each in its own transaction, under an advisory lock
 * so instances starting together never apply one twice.
 */
export async function migrate(pool: pg.Pool, migrations: readonly Migration[], { onWait }: { readonly onWait?: () => void } = {}): Promise<number[]> {
  const sorted = [...migrations].sort((a, b) => a.version - b.version);
  sorted.forEach((m, i) => {
    if (i > 0 && sorted[i - 1]?.version === m.version) {
      throw new ServiceKitError(ServiceKitErrors.MIGRATION_FAILED, `duplicate migration version ${m.version}`);
    }
  });
  const client = await pool.connect();
  const applied: number[] = [];
  try {
    // Tried first, so that a start held up by another instance's migrations says so instead of
    // hanging silently (the wait has no bound: a migration may rightly take long).
    const got = await client.query<{ ok: boolean }>('SELECT pg_try_advisory_lock($1) AS ok', [MIGRATION_LOCK]);
    if (got.rows[0]?.ok !== true) {
      onWait?.();
      await client.query('SELECT pg_advisory_lock($1)', [MIGRATION_LOCK]);
    }
    await client.query(`CREATE TABLE IF NOT EXISTS schema_migrations (
      version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())`);
    const done = new Set((await client.query<{ version: number }>('SELECT version FROM schema_migrations')).rows.map((r) => r.version));
    for (const m of sorted) {
      if (done.has(m.version)) continue;
      try {
        await client.query('BEGIN');
        await client.query(m.sql);
        await client.query('INSERT INTO schema_migrations (version, name) VALUES ($1, $2)', [m.version, m.name]);
        await client.query('COMMIT');
        applied.push(m.version);
      } catch (error) {
        await client.query('ROLLBACK').catch(() => undefined);
        throw new ServiceKitError(ServiceKitErrors.MIGRATION_FAILED, `migration ${m.version} (${m.name}) failed: ${(error as Error).message}`, { cause: error });
      }
    }
    return applied;
  } finally {
    await client.query('SELECT pg_advisory_unlock($1)', [MIGRATION_LOCK]).catch(() => undefined);
    client.release();
  }
}

/*
 * Core migrations (owned by the libraries, the same in every service) take version 1 and versions
 * from 100 up; a service's own migrations use 2 to 99. Both kinds run in one version order.
 */

/** Version 1 of every service: the outbox and the inbox the runtime's exactly-once shell uses. */
export const coreMigration: Migration = { version: 1, name: 'outbox and inbox', sql: outboxTableSql + inboxMigrationSql };

/** Stored responses of Idempotency-Key requests, written in the same transaction as the command. */
export const idempotencyKeysMigration: Migration = { version: 100, name: 'idempotency keys', sql: idempotencyMigrationSql };

/** Task and event ids became 64-bit Snowflake ids; text holds them (and any id stored before). */
export const snowflakeIdsMigration: Migration = {
  version: 101,
  name: 'snowflake ids',
  sql: `
ALTER TABLE outbox ALTER COLUMN event_id TYPE text USING event_id::text;
ALTER TABLE inbox ALTER COLUMN task_id TYPE text USING task_id::text, ALTER COLUMN event_id TYPE text USING event_id::text;`,
};

/** Worker-id leases (and id segments) of this service's id generators. */
export const idgenMigration: Migration = { version: 102, name: 'id generator leases and segments', sql: idgenMigrationSql };

export const idgenLastIssuedMigration: Migration = { version: 103, name: 'id worker high-water marks', sql: idgenLastIssuedSql };

/** Outbox rows the relay gave up on (too large for their topic, or held behind one of their key). */
export const outboxFailedRowsMigration: Migration = { version: 104, name: 'outbox failed rows', sql: outboxFailedRowsMigrationSql };

/** Outbox payloads and headers kept as the JSON text written, and no unique index on event ids. */
export const outboxLeanRowsMigration: Migration = { version: 105, name: 'lean outbox rows', sql: outboxLeanRowsMigrationSql };

/** Pending outbox rows listed in a table of their own (marking a row published deletes its id), and no published_at. */
export const outboxPendingMigration: Migration = { version: 106, name: 'outbox pending rows', sql: outboxPendingMigrationSql };

/** Outbox rows that carry many messages (a bulk import's TaskCreated), and the outbox_messages view that lists them one by one. */
export const outboxBundlesMigration: Migration = { version: 107, name: 'outbox bundles', sql: outboxBundlesMigrationSql };

/** Every core migration, in the order services list them. */
export const coreMigrations: readonly Migration[] = [
  coreMigration,
  idempotencyKeysMigration,
  snowflakeIdsMigration,
  idgenMigration,
  idgenLastIssuedMigration,
  outboxFailedRowsMigration,
  outboxLeanRowsMigration,
  outboxPendingMigration,
  outboxBundlesMigration,
];
