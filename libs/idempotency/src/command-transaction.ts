import type pg from 'pg';
import { withTransaction } from '@labelflow/plumbing';
import type { IdempotentCommand } from './options';
import { asStored } from './problem';
import { claimIdempotencyKey, completeIdempotencyKey, type IdempotencyRecord, type StoredResponse } from './store';

/** The claim waited out its lock timeout: another request holds the key. */
export class ClaimTimedOut extends Error {
  constructor(cause: unknown) {
    super('the idempotency key stayed locked by another request', { cause });
  }
}

const isLockTimeout = (error: unknown) => (error as { code?: string }).code === '55P03';

/** The (scope, key) a keyed command claims, and how long it may wait for another holder of it. */
export interface KeyClaim {
  readonly scope: string;
  readonly key: string;
  readonly fingerprint: string;
  readonly now: Date;
  /** The claim's expiry, until the command completes (a takeover of an abandoned claim waits on its row lock anyway). */
  readonly expiresAt: Date;
  /**
   * The stored response's expiry, asked once the command is done: counted from the claim's start,
   * a command that outlasted the TTL (lock waits, a slow statement) would commit a record already
   * expired, and the client's retry would run the command again.
   */
  readonly expiresAtOnCompletion: () => Date;
  /** The claim's lock timeout: the wait for a concurrent request with the same key. */
  readonly waitMs: number;
  /**
   * The lock timeout of the command once the key is claimed (default `waitMs`). A short probe of
   * whether a key's owner is alive must not also become the budget of every lock the command takes.
   */
  readonly commandWaitMs?: number;
}

export type KeyedRun = { readonly kind: 'existing'; readonly existing: IdempotencyRecord } | { readonly kind: 'ran'; readonly result: StoredResponse; readonly expiresAt: Date };

/** Runs the command's body on the transaction's client (the plugin adds the request). */
type TransactionBody = <T>(fn: () => Promise<T>, tx: pg.PoolClient) => Promise<T>;

// Nothing of a command that answered ≥ 500 persists: like a throw, it is rolled back.
const committable = (result: StoredResponse) => result.status < 500;

/** The command in a plain transaction, with nothing stored: a route where the key is optional and none came. */
export function runUnkeyed(pool: pg.Pool, command: IdempotentCommand, body: TransactionBody): Promise<StoredResponse> {
  return withTransaction(pool, async (tx) => asStored(await body(() => command(tx, undefined), tx)), { commitIf: committable });
}

/**
 * Claim, command and stored response in one transaction, so they commit together or not at all.
 * A key another request already completed answers `existing` (and rolls back the claim attempt);
 * a key another request still holds past `waitMs` throws ClaimTimedOut. `commandWaitMs` (or
 * `waitMs`) then bounds, as a safety net, any lock the command itself waits for: it then fails as
 * transient.
 */
export function runKeyed(pool: pg.Pool, command: IdempotentCommand, body: TransactionBody, claim: KeyClaim): Promise<KeyedRun> {
  return withTransaction<KeyedRun>(
    pool,
    async (tx) => {
      let found: IdempotencyRecord | undefined;
      try {
        const claimed = await claimIdempotencyKey(tx, claim);
        found = claimed.claimed ? undefined : claimed.record;
      } catch (error) {
        throw isLockTimeout(error) ? new ClaimTimedOut(error) : error;
      }
      if (found) return { kind: 'existing', existing: found };
      const commandWaitMs = Math.max(1, Math.floor(claim.commandWaitMs ?? claim.waitMs));
      if (commandWaitMs !== Math.max(1, Math.floor(claim.waitMs))) await tx.query(`SET LOCAL lock_timeout = ${commandWaitMs}`);
      const result = asStored(await body(() => command(tx, claim.key), tx));
      const expiresAt = claim.expiresAtOnCompletion();
      if (committable(result)) await completeIdempotencyKey(tx, claim.scope, claim.key, result, expiresAt);
      return { kind: 'ran', result, expiresAt };
    },
    { lockTimeoutMs: Math.max(1, Math.floor(claim.waitMs)), commitIf: (run) => run.kind === 'ran' && committable(run.result) },
  );
}
