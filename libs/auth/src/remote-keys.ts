import { performance } from 'node:perf_hooks';
import { createLocalJWKSet, createRemoteJWKSet, errors, jwksCache, type ExportedJWKSCache, type JSONWebKeySet, type JWKSCacheInput, type JWTVerifyGetKey } from 'jose';
import { AuthError, AuthErrors } from './errors';

/** How long a fetched key set is trusted before it is fetched again. */
export const JWKS_CACHE_MAX_AGE_MS = 60_000;
/** An unknown `kid`, or a failed fetch, is not followed by another fetch sooner than this. */
export const JWKS_COOLDOWN_MS = 30_000;
/** How long the last key set fetched stays usable while the endpoint cannot be reached. */
export const DEFAULT_JWKS_STALE_MAX_MS = 3_600_000;
/**
 * How long a lookup past the cache age waits for the fetch it started before it answers from the
 * set in hand: a healthy endpoint answers well within it, so a withdrawn key is refused at once,
 * and one that hangs costs a request this, not the fetch's whole timeout.
 */
export const JWKS_REFRESH_WAIT_MS = 1_000;

export interface RemoteKeySetOptions {
  readonly timeoutMs: number;
  /** 0: a failed fetch past the cache age is a failure (503), as jose alone would have it. */
  readonly staleMaxMs: number;
  /** Called once per failed fetch while a key set last fetched `ageMs` ago is still in use. */
  readonly onStale?: (error: unknown, ageMs: number) => void;
}

/** Errors that are the token's fault (its `kid`, its key type), not the endpoint's. */
const isTokenFault = (error: unknown) =>
  error instanceof errors.JWKSNoMatchingKey || error instanceof errors.JWKSMultipleMatchingKeys || error instanceof errors.JOSENotSupported;

const unavailable = (cause: unknown) => new AuthError(AuthErrors.KEYS_UNAVAILABLE, 'the identity provider\'s keys could not be fetched', { retriable: true, cause });

/**
 * jose's remote key set, which forgets its keys once they are older than the cache age and then
 * makes the next lookups wait for a fetch, failing them while the identity provider is
 * unreachable: an outage of its key endpoint alone would answer every request 503 a minute later,
 * although no key changed, and an endpoint that hangs would hold requests for the fetch timeout.
 *
 * Past the cache age a lookup starts a fetch (one at a time, none within `JWKS_COOLDOWN_MS` of a
 * failed one) and waits for it at most `JWKS_REFRESH_WAIT_MS`; a fetch that has not answered by
 * then goes on in the background while the lookup answers from the set in hand, for `staleMaxMs`
 * after that set's fetch. Beyond that bound lookups wait for the endpoint again, as jose's do. A
 * `kid` the set in hand lacks waits for the fetch under way, and is answered as unavailable
 * (retriable), not as an invalid token, while the endpoint cannot be reached: the provider may
 * have added it.
 */
export function createResilientRemoteKeySet(url: URL, options: RemoteKeySetOptions): JWTVerifyGetKey {
  // jose writes each successful fetch here (`uat` is when, by Date.now).
  const cache: Partial<ExportedJWKSCache> = {};
  const remote = createRemoteJWKSet(url, { timeoutDuration: options.timeoutMs, cooldownDuration: JWKS_COOLDOWN_MS, cacheMaxAge: JWKS_CACHE_MAX_AGE_MS, [jwksCache]: cache as JWKSCacheInput });
  let local: { readonly jwks: JSONWebKeySet; readonly keys: JWTVerifyGetKey } | undefined;
  // Monotonic: a step of the wall clock must not stretch or skip the cool-down.
  let failedAt = Number.NEGATIVE_INFINITY;
  let refreshing: Promise<void> | undefined;

  /** The set last fetched and its age, while it may still be used; undefined before the first fetch and past `staleMaxMs`. */
  const inHand = (): { keys: JWTVerifyGetKey; ageMs: number } | undefined => {
    if (options.staleMaxMs <= 0 || cache.jwks === undefined || cache.uat === undefined) return undefined;
    const ageMs = Date.now() - cache.uat;
    if (ageMs > options.staleMaxMs) return undefined;
    if (local?.jwks !== cache.jwks) local = { jwks: cache.jwks, keys: createLocalJWKSet(cache.jwks) };
    return { keys: local.keys, ageMs };
  };
  const refresh = (): Promise<void> => {
    refreshing ??= remote
      .reload()
      .catch((error: unknown) => {
        failedAt = performance.now();
        const set = inHand();
        if (set) options.onStale?.(error, set.ageMs);
      })
      .finally(() => {
        refreshing = undefined;
      });
    return refreshing;
  };
  const coolingDown = () => performance.now() - failedAt < JWKS_COOLDOWN_MS;

  /** Resolves once the fetch under way ended, or after `JWKS_REFRESH_WAIT_MS`. */
  const briefly = async (fetching: Promise<void>) => {
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([fetching, new Promise<void>((resolve) => (timer = setTimeout(resolve, JWKS_REFRESH_WAIT_MS)))]);
    clearTimeout(timer);
  };

  const viaRemote: JWTVerifyGetKey = async (header, token) => {
    try {
      return await remote(header, token);
    } catch (error) {
      if (isTokenFault(error)) throw error;
      throw unavailable(error);
    }
  };

  return async (header, token) => {
    const set = inHand();
    if (set && set.ageMs > JWKS_CACHE_MAX_AGE_MS) {
      if (!coolingDown()) void refresh();
      if (refreshing) await briefly(refreshing);
      const fetched = inHand();
      if (fetched && fetched.ageMs <= JWKS_CACHE_MAX_AGE_MS) return viaRemote(header, token);
      try {
        return await set.keys(header, token);
      } catch (error) {
        if (!(error instanceof errors.JWKSNoMatchingKey)) throw error;
        // A key the set in hand lacks: the fetch under way may bring it.
        if (refreshing) await refreshing;
        const after = inHand();
        if (!after || after.ageMs > JWKS_CACHE_MAX_AGE_MS) throw unavailable(error);
        return after.keys(header, token);
      }
    }
    return viaRemote(header, token);
  };
}
