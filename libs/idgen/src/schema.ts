import type pg from 'pg';

/** The two idgen tables. Idempotent: safe to run on every start and as a service migration. */
export const idgenMigrationSql = `
CREATE TABLE IF NOT EXISTS idgen_worker_leases (
  namespace  text        NOT NULL,
  worker_id  integer     NOT NULL CHECK (worker_id >= 0 AND worker_id < 1024),
  owner      text        NOT NULL,
  expires_at timestamptz NOT NULL,
  PRIMARY KEY (namespace, worker_id)
);
CREATE TABLE IF NOT EXISTS idgen_segments (
  scope      text   PRIMARY KEY,
  next_value bigint NOT NULL CHECK (next_value > 0)
);
`;

/**
 * The high-water mark of each worker id: the last millisecond any holder issued ids in, recorded on
 * renewal and release. A new holder starts after it, so a release followed at once by a claim on a
 * host whose clock lags cannot repeat a millisecond + sequence the previous holder used.
 * A separate statement so that a migration which already shipped `idgenMigrationSql` stays as it was.
 */
export const idgenLastIssuedSql = `
ALTER TABLE idgen_worker_leases ADD COLUMN IF NOT EXISTS last_issued_ms bigint NOT NULL DEFAULT 0;
`;

// Concurrent CREATE TABLE IF NOT EXISTS can still collide in the catalog; serialise it.
const SCHEMA_LOCK = 0x1d6e4; // arbitrary, stable

/** Applies `idgenMigrationSql` and `idgenLastIssuedSql` under a transaction-scoped advisory lock (many processes may start at once). */
export async function ensureIdgenSchema(pool: pg.Pool): Promise<void> {
  const client = await pool.connect();
  try {
    await client.query('BEGIN');
    await client.query('SELECT pg_advisory_xact_lock($1)', [SCHEMA_LOCK]);
    await client.query(idgenMigrationSql);
    await client.query(idgenLastIssuedSql);
    await client.query('COMMIT');
  } catch (err) {
    await client.query('ROLLBACK').catch(() => undefined);
    throw err;
  } finally {
    client.release();
  }
}
