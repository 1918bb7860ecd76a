import type { Redis } from 'ioredis';
import { PlumbingError, PlumbingErrors, requirePositiveInteger } from './errors';

export type RedisFailureKind = 'timeout' | 'unavailable';
/** Builds the caller's own error (from its catalog) for a timeout or a Redis failure. */
export type RedisFailure = (kind: RedisFailureKind, message: string, cause?: unknown) => Error;

const plumbingFailure: RedisFailure = (kind, message, cause) =>
  new PlumbingError(kind === 'timeout' ? PlumbingErrors.REDIS_TIMEOUT : PlumbingErrors.REDIS_UNAVAILABLE, message, { cause, retriable: true });

/**
 * Awaits `work` for at most `timeoutMs`. A slower answer rejects with `fail('timeout')` and an
 * error with `fail('unavailable')`, so a slow Redis is a failure a breaker can count, never a stall.
 */
export async function boundedRedisCall<T>(what: string, work: Promise<T>, timeoutMs: number, fail: RedisFailure = plumbingFailure): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  let timedOut = false;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      timedOut = true;
      reject(fail('timeout', `redis ${what} exceeded ${timeoutMs} ms`));
    }, timeoutMs);
  });
  try {
    return await Promise.race([work, timeout]);
  } catch (error) {
    if (timedOut) throw error;
    throw fail('unavailable', `redis ${what} failed: ${(error as Error).message}`, error);
  } finally {
    clearTimeout(timer);
    // A late answer after the timeout must not surface as an unhandled rejection.
    work.catch(() => undefined);
  }
}

export interface LuaScriptsOptions<N extends string> {
  readonly redis: Redis;
  readonly scripts: Readonly<Record<N, string>>;
  /** Latency budget of one call: a slower answer counts as a failure. */
  readonly timeoutMs: number;
  /** Called when a script had to be (re)loaded: first use, or after NOSCRIPT. */
  readonly onScriptLoad?: (name: N) => void;
  /** Builds the caller's own error for a timeout or a Redis failure. Default: PlumbingError. */
  readonly fail?: RedisFailure;
}

export interface LuaScripts<N extends string> {
  /** Runs a script by EVALSHA, reloading it once on NOSCRIPT, within the latency budget. */
  run(name: N, keys: readonly string[], args: readonly (string | number)[]): Promise<unknown>;
  /** Applies the same latency budget and error mapping to any other Redis call. */
  bounded<T>(what: string, work: Promise<T>): Promise<T>;
}

/**
 * Lua scripts loaded once and run by EVALSHA. A NOSCRIPT answer (Redis restarted, or its script
 * cache was flushed) reloads the script and retries once. Every call is bounded (see
 * `boundedRedisCall`).
 */
export function createLuaScripts<N extends string>({ redis, scripts, timeoutMs, onScriptLoad, fail = plumbingFailure }: LuaScriptsOptions<N>): LuaScripts<N> {
  requirePositiveInteger('redis timeoutMs', timeoutMs);
  const shas = new Map<N, string>();

  async function load(name: N): Promise<string> {
    const sha = (await redis.script('LOAD', scripts[name])) as string;
    shas.set(name, sha);
    onScriptLoad?.(name);
    return sha;
  }

  async function evalsha(name: N, keys: readonly string[], args: readonly (string | number)[]): Promise<unknown> {
    const sha = shas.get(name) ?? (await load(name));
    try {
      return await redis.evalsha(sha, keys.length, ...keys, ...args);
    } catch (error) {
      if (!String((error as Error).message).startsWith('NOSCRIPT')) throw error;
      return redis.evalsha(await load(name), keys.length, ...keys, ...args);
    }
  }

  const bounded = <T>(what: string, work: Promise<T>): Promise<T> => boundedRedisCall(what, work, timeoutMs, fail);
  return { run: (name, keys, args) => bounded(name, evalsha(name, keys, args)), bounded };
}
