import { createLocalJWKSet, createRemoteJWKSet, errors, jwksCache, type ExportedJWKSCache, type JWKSCacheInput, type JWTVerifyGetKey } from 'jose';
import { AuthError, AuthErrors } from './errors';

/** How long a fetched key set is trusted before it is fetched again. */
export const JWKS_CACHE_MAX_AGE_MS = 60_000;
/** An unknown `kid`, or a failed fetch, is not followed by another fetch sooner than this. */
export const JWKS_COOLDOWN_MS = 30_000;
/** How long the last key set fetched stays usable while the endpoint cannot be reached. */
export const DEFAULT_JWKS_STALE_MAX_MS = 3_600_000;

export interface RemoteKeySetOptions {
  readonly timeoutMs: number;
  /** 0: a failed fetch past the cache age is a failure (503), as jose alone would have it. */
  readonly staleMaxMs: number;
  /** Called when a lookup is answered from the last good key set because the endpoint failed. */
  readonly onStale?: (error: unknown, ageMs: number) => void;
}

/** Errors that are the token's fault (its `kid`, its key type), not the endpoint's. */
const isTokenFault = (error: unknown) =>
  error instanceof errors.JWKSNoMatchingKey || error instanceof errors.JWKSMultipleMatchingKeys || error instanceof errors.JOSENotSupported;

const unavailable = (cause: unknown) => new AuthError(AuthErrors.KEYS_UNAVAILABLE, 'the identity provider\'s keys could not be fetched', { retriable: true, cause });

/**
 * jose's remote key set, which forgets its keys once they are older than the cache age and then
 * fails every lookup while the identity provider is unreachable: an outage of the provider's key
 * endpoint alone would answer every request 503 a minute later, although no key changed. This
 * keeps answering from the last set fetched for `staleMaxMs` after that fetch, and asks the
 * endpoint again at most every `JWKS_COOLDOWN_MS` meanwhile, so a hanging endpoint does not make
 * each request wait out the fetch timeout. A `kid` the stale set lacks is answered as unavailable
 * (retriable), not as an invalid token: the key may be one the provider added during the outage.
 */
export function createResilientRemoteKeySet(url: URL, options: RemoteKeySetOptions): JWTVerifyGetKey {
  // jose writes each successful fetch here (`uat` is when, by Date.now).
  const cache: Partial<ExportedJWKSCache> = {};
  const remote = createRemoteJWKSet(url, { timeoutDuration: options.timeoutMs, cooldownDuration: JWKS_COOLDOWN_MS, cacheMaxAge: JWKS_CACHE_MAX_AGE_MS, [jwksCache]: cache as JWKSCacheInput });
  let stale: { readonly uat: number; readonly keys: JWTVerifyGetKey } | undefined;
  let failedAt = Number.NEGATIVE_INFINITY;

  const staleKeys = (): { keys: JWTVerifyGetKey; ageMs: number } | undefined => {
    if (options.staleMaxMs <= 0 || cache.jwks === undefined || cache.uat === undefined) return undefined;
    const ageMs = Date.now() - cache.uat;
    if (ageMs > options.staleMaxMs) return undefined;
    if (stale?.uat !== cache.uat) stale = { uat: cache.uat, keys: createLocalJWKSet(cache.jwks) };
    return { keys: stale.keys, ageMs };
  };
  const fromStale: JWTVerifyGetKey = async (header, token) => {
    const set = staleKeys();
    if (!set) throw unavailable(undefined);
    try {
      return await set.keys(header, token);
    } catch (error) {
      if (error instanceof errors.JWKSNoMatchingKey) throw unavailable(error);
      throw error;
    }
  };

  return async (header, token) => {
    if (Date.now() - failedAt < JWKS_COOLDOWN_MS && staleKeys()) return fromStale(header, token);
    try {
      return await remote(header, token);
    } catch (error) {
      if (isTokenFault(error)) throw error;
      failedAt = Date.now();
      const set = staleKeys();
      if (!set) throw unavailable(error);
      options.onStale?.(error, set.ageMs);
      return fromStale(header, token);
    }
  };
}
