import { randomBytes } from 'node:crypto';
import { hostname } from 'node:os';
import { performance } from 'node:perf_hooks';
import { IdgenError, IdgenErrors } from './errors';
import { MAX_WORKER_ID } from './snowflake';
import type { Queryable } from './types';

export interface WorkerLeaseOptions {
  /** pg pool (or anything with `query`) on the database holding `idgen_worker_leases`. */
  readonly pool: Queryable;
  /** Worker ids are unique per namespace (e.g. one namespace per id space / service). */
  readonly namespace: string;
  /** Lease length; a crashed holder's id becomes free this long after its last renewal. Default 30 000. */
  readonly ttlMs?: number;
  /** Background renewal period; must be shorter than `ttlMs`. Default 10 000. */
  readonly renewEveryMs?: number;
  /** Size of the id space: ids 0..maxWorkers-1. At most 1024 (10 bits). Default 1024. */
  readonly maxWorkers?: number;
  /** Human label of the holder (service, host). A random suffix is appended to make it unique per lease. */
  readonly owner?: string;
  /** Called once when a renewal finds the row taken over or gone; the lease is invalid from then on. */
  readonly onLost?: (info: { namespace: string; workerId: number; owner: string }) => void;
  /** Called when a background renewal fails (database unreachable). The lease stays valid until its local deadline. */
  readonly onRenewError?: (err: unknown) => void;
  /**
   * The last millisecond (since the Unix epoch) this holder issued ids in, e.g. `() => snowflake.lastIssuedMs()`.
   * Recorded with every renewal and on release, as the worker id's high-water mark for the next holder.
   */
  readonly lastIssuedMs?: () => number;
}

export interface WorkerLease {
  readonly namespace: string;
  /** The stored owner: `${owner}#${random}`. */
  readonly owner: string;
  /** The leased id. Throws before `acquire()` resolved. */
  readonly workerId: number;
  /**
   * The worker id's high-water mark when this lease took it: the last millisecond a previous holder
   * issued ids in (0 if none). Pass it to `createSnowflake({ issuedUpToMs })`. Throws before `acquire()` resolved.
   */
  readonly issuedUpToMs: number;
  /**
   * True while ids may be issued under this worker id: acquired, not released, not lost, and the
   * last successful renewal is younger than `ttlMs` by this process's monotonic clock.
   */
  readonly valid: boolean;
  readonly lost: boolean;
  /** Claims the lowest free or expired worker id and starts background renewal. Returns the id. */
  acquire(): Promise<number>;
  /** Extends the lease now. Resolves `false` (and fires `onLost`) if the lease was lost. */
  renew(): Promise<boolean>;
  /** Stops renewal and deletes the row, freeing the id at once. Idempotent. */
  release(): Promise<void>;
}

const ms = (name: string, v: number, min: number, max: number) => {
  if (!Number.isInteger(v) || v < min || v > max) throw new IdgenError(IdgenErrors.CONFIG_INVALID, `${name} must be an integer in ${min}..${max}, got ${v}`);
};

// One round trip: pick the lowest id that has no row or an expired row, claim it. Two claimers of
// the same candidate serialise on the primary key; the loser's ON CONFLICT ... WHERE re-checks the
// row the winner just wrote, finds it live, and returns no row (`worker_id` null) — it then retries.
// `candidate` null means every id is held by a live lease.
const CLAIM_SQL = `
WITH candidate AS (
  SELECT g.id
    FROM generate_series(0, $4::int - 1) AS g(id)
    LEFT JOIN idgen_worker_leases l ON l.namespace = $1 AND l.worker_id = g.id
   WHERE l.worker_id IS NULL OR l.expires_at < now()
   ORDER BY g.id
   LIMIT 1
), claimed AS (
  INSERT INTO idgen_worker_leases (namespace, worker_id, owner, expires_at)
  SELECT $1, id, $2, now() + $3::int * interval '1 millisecond' FROM candidate
  ON CONFLICT (namespace, worker_id) DO UPDATE
     SET owner = EXCLUDED.owner, expires_at = EXCLUDED.expires_at
   WHERE idgen_worker_leases.expires_at < now()
  RETURNING worker_id, last_issued_ms
)
SELECT (SELECT id FROM candidate) AS candidate, (SELECT worker_id FROM claimed) AS worker_id, (SELECT last_issued_ms FROM claimed)::text AS last_issued_ms`;

// Renewal succeeds as long as the row is still ours, even if it expired meanwhile: nobody else took
// the id, so nobody else issued ids under it.
const RENEW_SQL = `
UPDATE idgen_worker_leases SET expires_at = now() + $4::int * interval '1 millisecond', last_issued_ms = GREATEST(last_issued_ms, $5::bigint)
 WHERE namespace = $1 AND worker_id = $2 AND owner = $3
RETURNING worker_id`;

// Expires the row instead of deleting it: the id is free at once, and its high-water mark stays.
const RELEASE_SQL = `
UPDATE idgen_worker_leases SET expires_at = '-infinity', last_issued_ms = GREATEST(last_issued_ms, $4::bigint)
 WHERE namespace = $1 AND worker_id = $2 AND owner = $3`;

/**
 * A PostgreSQL-backed lease on a worker id, so no two live processes generate Snowflake ids with the
 * same worker id. Wire it to the generator with `createSnowflake({ workerId: lease.workerId, isValid: () => lease.valid })`.
 */
export function createWorkerLease(options: WorkerLeaseOptions): WorkerLease {
  const { pool, namespace, ttlMs = 30_000, renewEveryMs = 10_000, maxWorkers = MAX_WORKER_ID + 1, onLost, onRenewError, lastIssuedMs = () => 0 } = options;
  if (typeof namespace !== 'string' || namespace.length === 0 || namespace.length > 200) {
    throw new IdgenError(IdgenErrors.CONFIG_INVALID, 'namespace must be a non-empty string of at most 200 characters');
  }
  ms('ttlMs', ttlMs, 100, 24 * 3600_000);
  ms('renewEveryMs', renewEveryMs, 10, ttlMs - 1);
  ms('maxWorkers', maxWorkers, 1, MAX_WORKER_ID + 1);
  const owner = `${options.owner ?? `${hostname()}:${process.pid}`}#${randomBytes(6).toString('hex')}`;

  let workerId: number | undefined;
  let issuedUpToMs = 0;
  let deadline = 0; // performance.now() after which we may no longer issue ids without a renewal
  let lost = false;
  let released = false;
  let timer: NodeJS.Timeout | undefined;
  let renewing: Promise<boolean> | undefined;

  const stop = () => {
    if (timer) clearInterval(timer);
    timer = undefined;
  };

  const markLost = () => {
    if (lost) return;
    lost = true;
    stop();
    onLost?.({ namespace, workerId: workerId ?? -1, owner });
  };

  const renewOnce = async (): Promise<boolean> => {
    if (workerId === undefined || released) return false;
    if (lost) return false;
    const sentAt = performance.now(); // the database's expiry is at least this + ttl
    const res = await pool.query<{ worker_id: number }>(RENEW_SQL, [namespace, workerId, owner, ttlMs, Math.floor(lastIssuedMs())]);
    if (res.rows.length === 0) {
      if (!released) markLost();
      return false;
    }
    deadline = Math.max(deadline, sentAt + ttlMs);
    return true;
  };

  const renew = (): Promise<boolean> => {
    renewing ??= renewOnce().finally(() => {
      renewing = undefined;
    });
    return renewing;
  };

  return {
    namespace,
    owner,
    get workerId(): number {
      if (workerId === undefined) throw new IdgenError(IdgenErrors.LEASE_LOST, 'worker lease not acquired yet');
      return workerId;
    },
    get issuedUpToMs(): number {
      if (workerId === undefined) throw new IdgenError(IdgenErrors.LEASE_LOST, 'worker lease not acquired yet');
      return issuedUpToMs;
    },
    get valid(): boolean {
      return workerId !== undefined && !lost && !released && performance.now() < deadline;
    },
    get lost(): boolean {
      return lost;
    },
    async acquire(): Promise<number> {
      if (workerId !== undefined) return workerId;
      if (released) throw new IdgenError(IdgenErrors.LEASE_LOST, 'lease was released; create a new one');
      // Each lost race means another claimer won an id, so at most maxWorkers retries are useful.
      for (let attempt = 0; attempt <= maxWorkers; attempt++) {
        const sentAt = performance.now();
        const { rows } = await pool.query<{ candidate: number | null; worker_id: number | null; last_issued_ms: string | null }>(CLAIM_SQL, [namespace, owner, ttlMs, maxWorkers]);
        const row = rows[0];
        if (!row || row.candidate === null) break;
        if (row.worker_id === null) continue; // lost the race for that candidate: look again
        workerId = row.worker_id;
        issuedUpToMs = Number(row.last_issued_ms ?? 0);
        deadline = sentAt + ttlMs;
        timer = setInterval(() => {
          renew().catch((err: unknown) => onRenewError?.(err));
        }, renewEveryMs);
        timer.unref();
        return workerId;
      }
      throw new IdgenError(IdgenErrors.NO_FREE_WORKER_ID, `all ${maxWorkers} worker ids of namespace "${namespace}" are leased`, {
        retriable: true,
        details: { namespace, maxWorkers },
      });
    },
    renew,
    async release(): Promise<void> {
      if (released) return;
      released = true;
      stop();
      await renewing?.catch(() => undefined);
      if (workerId !== undefined && !lost) await pool.query(RELEASE_SQL, [namespace, workerId, owner, Math.floor(lastIssuedMs())]);
    },
  };
}
