import { IdempotencyError, IdempotencyErrors } from './errors';
import type { Queryable } from '@labelflow/plumbing';

/**
 * The authoritative record, one row per (scope, key). Services append this to their migrations.
 * `status_code` and `response` are NULL only inside the owning transaction (the row is claimed
 * first, the command runs, then the row is completed before COMMIT), so no other transaction ever
 * sees a row without its response.
 */
export const idempotencyMigrationSql = `
CREATE TABLE IF NOT EXISTS idempotency_keys (
  scope        text        NOT NULL,
  key          text        NOT NULL,
  fingerprint  text        NOT NULL,
  status_code  integer,
  response     jsonb,
  created_at   timestamptz NOT NULL,
  expires_at   timestamptz NOT NULL,
  PRIMARY KEY (scope, key)
);
CREATE INDEX IF NOT EXISTS idempotency_keys_expires_at_idx ON idempotency_keys (expires_at);
`;

/** The response the command returned and the plugin stores and replays. */
export interface StoredResponse {
  readonly status: number;
  /** Absent for an empty body (e.g. 204). */
  readonly body?: unknown;
  /** Response headers the command chose to return (e.g. `location`); replayed verbatim. */
  readonly headers?: Readonly<Record<string, string>>;
}

export interface IdempotencyRecord {
  readonly fingerprint: string;
  readonly response: StoredResponse;
  readonly expiresAt: Date;
}

interface Row {
  fingerprint: string;
  status_code: number | null;
  response: { body?: unknown; headers?: Record<string, string> } | null;
  expires_at: Date;
}

const toRecord = (row: Row): IdempotencyRecord | undefined => {
  if (row.status_code === null) return undefined;
  const stored = row.response ?? {};
  return {
    fingerprint: row.fingerprint,
    expiresAt: row.expires_at,
    response: {
      status: row.status_code,
      ...('body' in stored ? { body: stored.body } : {}),
      ...(stored.headers ? { headers: stored.headers } : {}),
    },
  };
};

export type Claim = { readonly claimed: true } | { readonly claimed: false; readonly record: IdempotencyRecord };

/**
 * Claims (scope, key) inside the caller's transaction, in one statement: a new key is inserted, an
 * expired record is taken over as if absent. The INSERT … ON CONFLICT waits for a concurrent
 * transaction that inserted the same key: if that one commits, this returns its record; if it
 * rolls back, this one claims the key. Run with a `lock_timeout` so a long-running owner turns into
 * a lock error.
 */
export async function claimIdempotencyKey(
  tx: Queryable,
  entry: { scope: string; key: string; fingerprint: string; now: Date; expiresAt: Date },
): Promise<Claim> {
  // A record can vanish between the INSERT and the SELECT (expired and pruned): claim again.
  for (let attempt = 0; attempt < 3; attempt++) {
    const claimed = await tx.query(
      `INSERT INTO idempotency_keys (scope, key, fingerprint, created_at, expires_at) VALUES ($1, $2, $3, $4, $5)
       ON CONFLICT (scope, key) DO UPDATE SET fingerprint = EXCLUDED.fingerprint, status_code = NULL, response = NULL,
         created_at = EXCLUDED.created_at, expires_at = EXCLUDED.expires_at
       WHERE idempotency_keys.expires_at <= EXCLUDED.created_at`,
      [entry.scope, entry.key, entry.fingerprint, entry.now, entry.expiresAt],
    );
    if (claimed.rowCount === 1) return { claimed: true };
    const found = await tx.query<Row>('SELECT fingerprint, status_code, response, expires_at FROM idempotency_keys WHERE scope = $1 AND key = $2', [entry.scope, entry.key]);
    const record = found.rows[0] && toRecord(found.rows[0]);
    if (record) return { claimed: false, record };
  }
  throw new IdempotencyError(IdempotencyErrors.STORE_CONTENDED, `idempotency key ${entry.key} could not be claimed nor read`, { retriable: true });
}

/** Writes the command's response, and its expiry counted from now, into the claimed row, in the same transaction as its effects. */
export async function completeIdempotencyKey(tx: Queryable, scope: string, key: string, response: StoredResponse, expiresAt: Date): Promise<void> {
  const stored = { ...('body' in response && response.body !== undefined ? { body: response.body } : {}), ...(response.headers ? { headers: response.headers } : {}) };
  await tx.query('UPDATE idempotency_keys SET status_code = $3, response = $4, expires_at = $5 WHERE scope = $1 AND key = $2', [scope, key, response.status, JSON.stringify(stored), expiresAt]);
}

/** The committed, unexpired record for (scope, key), if any. */
export async function readIdempotencyKey(db: Queryable, scope: string, key: string, now: Date): Promise<IdempotencyRecord | undefined> {
  const found = await db.query<Row>(
    'SELECT fingerprint, status_code, response, expires_at FROM idempotency_keys WHERE scope = $1 AND key = $2 AND expires_at > $3',
    [scope, key, now],
  );
  return found.rows[0] && toRecord(found.rows[0]);
}

/**
 * Deletes expired records in batches (each its own short statement) and returns how many went.
 * Expired records are already ignored by the plugin; pruning only reclaims space. Call it from a
 * periodic job (a sweeper; the services prune hourly).
 */
export async function pruneIdempotencyKeys(db: Queryable, { now = new Date(), batchSize = 1_000, signal }: { now?: Date; batchSize?: number; signal?: AbortSignal } = {}): Promise<number> {
  let total = 0;
  // An aborted `signal` (a shutdown) stops it between batches; the rest is left to the next prune.
  while (signal?.aborted !== true) {
    const deleted = await db.query(
      `DELETE FROM idempotency_keys WHERE ctid IN (
         SELECT ctid FROM idempotency_keys WHERE expires_at <= $1 LIMIT $2 FOR UPDATE SKIP LOCKED)`,
      [now, batchSize],
    );
    total += deleted.rowCount ?? 0;
    if ((deleted.rowCount ?? 0) < batchSize) return total;
  }
  return total;
}
