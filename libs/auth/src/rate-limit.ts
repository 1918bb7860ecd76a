import { AuthError, AuthErrors } from './errors';
import type { Redis } from 'ioredis';
import { boundedRedisCall, CircuitBreaker, type BreakerOptions } from '@labelflow/plumbing';

/**
 * GCRA (the generic cell rate algorithm, a token bucket with one stored number): the key holds the
 * theoretical arrival time of the next request. The time is Redis's own, so every instance sharing
 * the key agrees on it whatever their clocks say. Microseconds fit a Lua double exactly until 2255.
 */
const GCRA = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local interval = tonumber(ARGV[1])
local tolerance = tonumber(ARGV[2])
local tat = tonumber(redis.call('GET', KEYS[1]) or '0')
if tat < now then tat = now end
local next_tat = tat + interval
local allow_at = next_tat - tolerance
if allow_at > now then return {0, allow_at - now} end
redis.call('SET', KEYS[1], string.format('%.0f', next_tat), 'PX', math.ceil((next_tat - now) / 1000) + 1)
return {1, 0}`;

export type RateDecision = { readonly ok: true } | { readonly ok: false; readonly retryAfterMs: number };

export interface RateLimiter {
  /** Takes one request from `subject`'s allowance. */
  take(subject: string): Promise<RateDecision>;
}

export interface RateLimiterOptions {
  /** Shared by every instance of one service, so the allowance is the service's, not the process's. */
  readonly redis?: Redis;
  /** Key prefix, e.g. `lf:rl:<topic prefix>:<service>`. */
  readonly namespace: string;
  /** Sustained requests per second per subject. */
  readonly perSecond: number;
  /** Requests a subject may send at once after being idle. */
  readonly burst: number;
  /** How long to wait for Redis before deciding locally. Default 100 ms. */
  readonly timeoutMs?: number;
  /** Subjects the local fallback remembers; the least recently seen are forgotten. Default 10 000. */
  readonly localCapacity?: number;
  /** Called when Redis did not answer, or was skipped, and this instance decided alone. */
  readonly onFallback?: (error: unknown) => void;
  /**
   * After `failureThreshold` calls in a row that failed or outlasted `timeoutMs`, Redis is skipped
   * for `openMs`, then one call tries it again. A Redis that hangs instead of refusing would
   * otherwise cost every request the whole timeout, and its queued scripts would all run once it
   * came back, spending allowances nobody used. Default 5 failures, 1000 ms.
   */
  readonly breaker?: Pick<BreakerOptions, 'failureThreshold' | 'openMs'>;
  readonly nowMs?: () => number;
}

/** What `onFallback` hears while the breaker skips Redis. */
export const SKIPPED = new Error('redis skipped: it failed or stalled repeatedly; deciding locally until a trial call answers');

type RedisWithGcra = Redis & { labelflowGcra(key: string, intervalUs: number, toleranceUs: number): Promise<[number, number]> };

/**
 * Per-subject rate limits shared across instances through Redis. When Redis is away each instance
 * limits on its own (the same rate, so at most instances x rate get through): a limiter that fails
 * closed would turn a Redis outage into a full outage, one that fails open would drop the limit.
 */
export function createRateLimiter(options: RateLimiterOptions): RateLimiter {
  if (!(options.perSecond > 0) || !(options.burst >= 1)) throw new AuthError(AuthErrors.CONFIG_INVALID, 'perSecond must be > 0 and burst >= 1');
  const intervalUs = Math.ceil(1_000_000 / options.perSecond);
  const toleranceUs = intervalUs * Math.floor(options.burst);
  const local = localGcra(intervalUs, toleranceUs, options.localCapacity ?? 10_000, options.nowMs ?? Date.now);
  const redis = options.redis as RedisWithGcra | undefined;
  if (redis && typeof redis.labelflowGcra !== 'function') redis.defineCommand('labelflowGcra', { numberOfKeys: 1, lua: GCRA });
  const timeoutMs = options.timeoutMs ?? 100;
  const breaker = new CircuitBreaker({ failureThreshold: 5, openMs: 1_000, ...options.breaker, ...(options.nowMs ? { now: options.nowMs } : {}) });

  return {
    async take(subject) {
      if (!redis) return local(subject);
      if (!breaker.allow()) {
        options.onFallback?.(SKIPPED);
        return local(subject);
      }
      try {
        const [allowed, waitUs] = await boundedRedisCall('rate limit', redis.labelflowGcra(`${options.namespace}:${subject}`, intervalUs, toleranceUs), timeoutMs);
        breaker.success();
        return allowed === 1 ? { ok: true } : { ok: false, retryAfterMs: Math.ceil(Number(waitUs) / 1000) };
      } catch (error) {
        breaker.failure();
        options.onFallback?.(error);
        return local(subject);
      }
    },
  };
}

/** The same algorithm in memory, for when Redis is away (and for services without Redis). */
function localGcra(intervalUs: number, toleranceUs: number, capacity: number, nowMs: () => number): (subject: string) => RateDecision {
  const tats = new Map<string, number>();
  return (subject) => {
    const now = nowMs() * 1000;
    const tat = Math.max(tats.get(subject) ?? 0, now);
    const next = tat + intervalUs;
    const allowAt = next - toleranceUs;
    if (allowAt > now) return { ok: false, retryAfterMs: Math.ceil((allowAt - now) / 1000) };
    // Re-inserting moves the subject to the end: the Map's first key is the least recently seen.
    tats.delete(subject);
    tats.set(subject, next);
    if (tats.size > capacity) tats.delete(tats.keys().next().value as string);
    return { ok: true };
  };
}
