import type { Redis } from 'ioredis';
import { createLuaScripts } from '@labelflow/plumbing';
import { IdempotencyError, IdempotencyErrors } from './errors';
import type { StoredResponse } from './store';

// Values under a key: a lock `L<fingerprint><owner>` while the first request runs, then the
// response `D<fingerprint><json>` until the record expires. Fingerprints are 64 hex characters.
const LOCK = 'L';
const DONE = 'D';
const FP_LENGTH = 64;

// The one script of the fast path, three operations (ARGV[1]):
//  begin   — atomically: a lock or a response present → return it; else take the lock (PX lockMs).
//  finish  — after COMMIT: the response replaces the lock (PX until the record expires).
//  release — after a failure: delete the lock only if it is still this owner's.
const SCRIPT = `
local op = ARGV[1]
if op == 'begin' then
  local v = redis.call('GET', KEYS[1])
  if v then return v end
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
  return false
elseif op == 'finish' then
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
  return 1
elseif op == 'release' then
  if redis.call('GET', KEYS[1]) == ARGV[2] then
    redis.call('DEL', KEYS[1])
    return 1
  end
  return 0
end
return redis.error_reply('unknown op ' .. tostring(op))`;

export type RedisSeen =
  | { readonly kind: 'acquired' }
  | { readonly kind: 'locked'; readonly fingerprint: string }
  | { readonly kind: 'done'; readonly fingerprint: string; readonly response: StoredResponse }
  /**
   * A value this library cannot read (another version's format, a foreign writer): Redis answered,
   * so it is no failure of Redis (which would count against the breaker for every key), but it
   * vouches for nothing either. PostgreSQL decides, and `finish` overwrites the value.
   */
  | { readonly kind: 'unreadable' };

export interface RedisTierOptions {
  readonly redis: Redis;
  readonly lockMs: number;
  /** Latency budget per call: a slower answer is a failure and the caller falls back. */
  readonly timeoutMs: number;
  readonly onScriptLoad?: () => void;
}

export interface IdempotencyRedisTier {
  begin(redisKey: string, fingerprint: string, owner: string): Promise<RedisSeen>;
  finish(redisKey: string, fingerprint: string, response: StoredResponse, ttlMs: number): Promise<void>;
  release(redisKey: string, fingerprint: string, owner: string): Promise<void>;
}

export const lockValue = (fingerprint: string, owner: string): string => `${LOCK}${fingerprint}${owner}`;
export const doneValue = (fingerprint: string, response: StoredResponse): string => `${DONE}${fingerprint}${JSON.stringify(response)}`;

/** Parses what `begin` found; undefined for a value this library did not write. */
export function parseSeen(value: string): RedisSeen | undefined {
  const fingerprint = value.slice(1, 1 + FP_LENGTH);
  if (fingerprint.length !== FP_LENGTH) return undefined;
  if (value.startsWith(LOCK)) return { kind: 'locked', fingerprint };
  if (value.startsWith(DONE)) {
    try {
      const response = JSON.parse(value.slice(1 + FP_LENGTH)) as StoredResponse;
      if (typeof response?.status === 'number') return { kind: 'done', fingerprint, response };
    } catch {
      // corrupt: treated as unknown
    }
  }
  return undefined;
}

/**
 * The Redis fast path (one script; see createLuaScripts for EVALSHA, NOSCRIPT and the latency
 * budget). Every failure throws an IdempotencyError: callers fall back to PostgreSQL, the authority.
 */
export function createIdempotencyRedisTier({ redis, lockMs, timeoutMs, onScriptLoad }: RedisTierOptions): IdempotencyRedisTier {
  const lua = createLuaScripts({
    redis,
    scripts: { idempotency: SCRIPT },
    timeoutMs,
    ...(onScriptLoad ? { onScriptLoad: () => onScriptLoad() } : {}),
    fail: (kind, message, cause) =>
      new IdempotencyError(kind === 'timeout' ? IdempotencyErrors.REDIS_TIMEOUT : IdempotencyErrors.REDIS_UNAVAILABLE, message, { cause, retriable: true }),
  });
  const run = (key: string, args: readonly (string | number)[]) => lua.run('idempotency', [key], args);

  return {
    async begin(redisKey, fingerprint, owner) {
      const found = await run(redisKey, ['begin', lockValue(fingerprint, owner), lockMs]);
      if (found === null || found === undefined) return { kind: 'acquired' };
      return parseSeen(String(found)) ?? { kind: 'unreadable' };
    },
    async finish(redisKey, fingerprint, response, ttlMs) {
      await run(redisKey, ['finish', doneValue(fingerprint, response), Math.max(1, Math.ceil(ttlMs))]);
    },
    async release(redisKey, fingerprint, owner) {
      await run(redisKey, ['release', lockValue(fingerprint, owner)]);
    },
  };
}
