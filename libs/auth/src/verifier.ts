import { createLocalJWKSet, errors, jwtVerify, type JSONWebKeySet, type JWTPayload, type JWTVerifyGetKey } from 'jose';
import type { Result } from '@labelflow/contracts';
import { AuthError, AuthErrors } from './errors';
import { principalFromClaims, type Principal } from './principal';
import { createResilientRemoteKeySet, DEFAULT_JWKS_STALE_MAX_MS } from './remote-keys';

/** Asymmetric algorithms accepted from a key set; `none` and HMAC never are. */
export const ASYMMETRIC_ALGORITHMS = ['RS256', 'ES256', 'EdDSA', 'Ed25519'] as const;
/** The only symmetric algorithm, and only when a shared secret is configured (development). */
export const SYMMETRIC_ALGORITHM = 'HS256';
/** A shared secret shorter than this is guessable offline from any token. */
export const MIN_SECRET_BYTES = 32;

export interface TokenVerifierOptions {
  /** Expected `iss`. */
  readonly issuer: string;
  /** Expected `aud` (one of the token's audiences). */
  readonly audience: string;
  /** Public keys as a JWKS document (inline or read from a file by the caller). */
  readonly jwks?: JSONWebKeySet;
  /** An identity provider's JWKS endpoint; fetched lazily, cached, refetched for an unknown `kid`. */
  readonly jwksUrl?: string;
  /** HS256 secret: development only, and only when explicitly configured. */
  readonly sharedSecret?: string;
  /** Allowed clock difference for `exp` and `nbf`, in seconds. Default 30. */
  readonly clockToleranceS?: number;
  /** How long a remote JWKS fetch may take. Default 5000 ms. */
  readonly jwksTimeoutMs?: number;
  /**
   * How long after its fetch the last key set from `jwksUrl` still verifies tokens while the
   * endpoint cannot be reached (default 1 h; 0: not at all, every request is 503 once the set is a
   * minute old). A key withdrawn during such an outage stays accepted that long.
   */
  readonly jwksStaleMaxMs?: number;
  /** Told when a token is checked against that stale key set (the endpoint failed). */
  readonly onStaleKeys?: (error: unknown, ageMs: number) => void;
  /** Verified tokens remembered (a client sends one token many times). Default 10 000; 0 turns it off. */
  readonly cacheSize?: number;
  /**
   * How long a verified token is remembered, at most (and never past its `exp`). Default 60 s: a
   * key taken out of the key set, or a token the identity provider stopped accepting, is refused
   * again within this long, while a busy client still pays for one signature check a minute.
   */
  readonly cacheTtlMs?: number;
  /**
   * The longest lifetime a token may claim, `exp` - `iat` (or `exp` - now without `iat`), seconds.
   * Default 86 400 (24 h). A leaked long-lived token is the worst case of a leaked key; an `iat`
   * in the future (beyond the clock tolerance) is refused too.
   */
  readonly maxLifetimeS?: number;
  /**
   * `at+jwt`: accept only tokens whose `typ` header says they are OAuth access tokens (RFC 9068).
   * Unset: also `JWT` and no `typ`, as most identity providers issue access tokens, at the price
   * that an OpenID Connect ID token of the same provider, whose audience is this resource server's
   * and which carries the roles claim, is accepted as one too.
   */
  readonly requiredType?: 'at+jwt';
  readonly nowMs?: () => number;
}

export interface TokenVerifier {
  /** Verifies a compact JWS; `retriable` failures (keys unreachable) are thrown as AuthError, not returned. */
  verify(token: string): Promise<Result<Principal>>;
}

/** Checks the options make a verifier: at least one key source, and a shared secret long enough. */
export function checkVerifierOptions(options: TokenVerifierOptions): string[] {
  const problems: string[] = [];
  if (!options.jwks && !options.jwksUrl && !options.sharedSecret) problems.push('no key source: give a JWKS (inline or file), a JWKS URL, or (development only) a shared secret');
  if (options.jwks && options.jwksUrl) problems.push('give either an inline JWKS or a JWKS URL, not both');
  if (options.sharedSecret !== undefined && Buffer.byteLength(options.sharedSecret) < MIN_SECRET_BYTES) problems.push(`the shared secret must be at least ${MIN_SECRET_BYTES} bytes`);
  if (options.jwks && (!Array.isArray(options.jwks.keys) || options.jwks.keys.length === 0)) problems.push('the JWKS has no keys');
  for (const key of options.jwks?.keys ?? []) {
    if (key.kty === 'oct') problems.push('the JWKS holds a symmetric (oct) key; publish only public keys there');
    if ('d' in key) problems.push('the JWKS holds a private key; publish only public keys');
  }
  if (!options.issuer) problems.push('issuer is required');
  if (!options.audience) problems.push('audience is required');
  if (options.jwksStaleMaxMs !== undefined && !(Number.isInteger(options.jwksStaleMaxMs) && options.jwksStaleMaxMs >= 0)) problems.push('jwksStaleMaxMs must be a whole number of milliseconds, 0 or more');
  return problems;
}

/**
 * A resource server's token check: signature by a configured key, an allowed algorithm, `iss`,
 * `aud`, `exp` (required) and `nbf` within the clock tolerance, a well-formed `sub` and
 * labelflow claim.
 */
export function createTokenVerifier(options: TokenVerifierOptions): TokenVerifier {
  const problems = checkVerifierOptions(options);
  if (problems.length > 0) throw new AuthError(AuthErrors.CONFIG_INVALID, `invalid token verifier settings: ${problems.join('; ')}`, { details: problems });
  const keySet: JWTVerifyGetKey | undefined = options.jwks
    ? createLocalJWKSet(options.jwks)
    : options.jwksUrl
      ? // A key the identity provider withdrew (leaked, rotated out) is refused within a minute of
        // the next token's check: one small fetch a minute per service is the price.
        createResilientRemoteKeySet(new URL(options.jwksUrl), {
          timeoutMs: options.jwksTimeoutMs ?? 5_000,
          staleMaxMs: options.jwksStaleMaxMs ?? DEFAULT_JWKS_STALE_MAX_MS,
          ...(options.onStaleKeys ? { onStale: options.onStaleKeys } : {}),
        })
      : undefined;
  const secret = options.sharedSecret === undefined ? undefined : new TextEncoder().encode(options.sharedSecret);
  const algorithms = [...(keySet ? ASYMMETRIC_ALGORITHMS : []), ...(secret ? [SYMMETRIC_ALGORITHM] : [])];
  // The algorithm list is checked before this runs, so an HS256 header can never reach the key set
  // (the classic confusion of a public key used as an HMAC secret).
  const getKey: JWTVerifyGetKey = async (header, token) => {
    if (header.alg === SYMMETRIC_ALGORITHM && secret) return secret;
    if (!keySet) throw new errors.JOSEAlgNotAllowed(`alg ${header.alg} is not accepted`);
    if (!options.jwksUrl) return keySet(header, token);
    try {
      return await keySet(header, token);
    } catch (error) {
      if (error instanceof AuthError) throw error;
      // Only "no such key" is the token's fault; an endpoint that failed, answered non-200 or sent
      // something that is not a key set says nothing about the token, which may well be valid.
      if (error instanceof errors.JWKSNoMatchingKey || error instanceof errors.JWKSMultipleMatchingKeys || error instanceof errors.JOSENotSupported) throw error;
      throw new AuthError(AuthErrors.KEYS_UNAVAILABLE, 'the identity provider\'s keys could not be fetched', { retriable: true, cause: error });
    }
  };
  const clockTolerance = options.clockToleranceS ?? 30;
  const cacheSize = options.cacheSize ?? 10_000;
  const cacheTtlMs = options.cacheTtlMs ?? DEFAULT_CACHE_TTL_MS;
  const maxLifetimeS = options.maxLifetimeS ?? DEFAULT_MAX_LIFETIME_S;
  const now = options.nowMs ?? Date.now;
  // A signature check costs more than the rest of a small request; the same bytes verified once
  // stay verified until `exp`. Only successes are kept, keyed by the whole token.
  const verified = new Map<string, { readonly principal: Principal; readonly expiresMs: number }>();

  const verifyOptions = () => ({ issuer: options.issuer, audience: options.audience, algorithms, clockTolerance, requiredClaims: ['exp', 'sub'], currentDate: new Date(now()) });
  /**
   * jwtVerify against the key set; a token without a `kid` while the set holds two keys of its type
   * (a rotation under way) is tried against each of them, so it is not refused for the provider's
   * overlap: only a signature none of them verifies fails.
   */
  async function verifySignature(token: string) {
    try {
      return await jwtVerify(token, getKey, verifyOptions());
    } catch (error) {
      if (!(error instanceof errors.JWKSMultipleMatchingKeys)) throw error;
      for await (const key of error as errors.JWKSMultipleMatchingKeys & AsyncIterable<Parameters<typeof jwtVerify>[1]>) {
        try {
          return await jwtVerify(token, key, verifyOptions());
        } catch (inner) {
          if (!(inner instanceof errors.JWSSignatureVerificationFailed)) throw inner;
        }
      }
      throw new errors.JWSSignatureVerificationFailed();
    }
  }

  return {
    async verify(token) {
      const hit = verified.get(token);
      if (hit && hit.expiresMs > now()) return { ok: true, value: hit.principal };
      if (hit) verified.delete(token);
      try {
        const { payload, protectedHeader } = await verifySignature(token);
        const kind = typeProblem(protectedHeader.typ, options.requiredType);
        if (kind) return { ok: false, reason: { code: AuthErrors.TOKEN_INVALID, message: kind } };
        const lifetime = lifetimeProblem(payload, { nowS: now() / 1000, maxLifetimeS, clockTolerance });
        if (lifetime) return { ok: false, reason: { code: AuthErrors.TOKEN_INVALID, message: lifetime } };
        const principal = principalFromClaims(payload);
        if (principal.ok && cacheSize > 0) {
          // Not before nbf - tolerance is already true; expiry is exp + tolerance, as jwtVerify judges it.
          verified.set(token, { principal: principal.value, expiresMs: Math.min(((payload.exp ?? 0) + clockTolerance) * 1000, now() + cacheTtlMs) });
          if (verified.size > cacheSize) verified.delete(verified.keys().next().value as string);
        }
        return principal;
      } catch (error) {
        if (error instanceof AuthError) throw error;
        if (error instanceof errors.JWKSTimeout || isFetchFailure(error)) {
          throw new AuthError(AuthErrors.KEYS_UNAVAILABLE, 'the identity provider\'s keys could not be fetched', { retriable: true, cause: error });
        }
        return { ok: false, reason: { code: AuthErrors.TOKEN_INVALID, message: describe(error) } };
      }
    },
  };
}

export const DEFAULT_CACHE_TTL_MS = 60_000;
export const DEFAULT_MAX_LIFETIME_S = 86_400;

/**
 * Header types of an access token: RFC 9068's `at+jwt` and the generic `JWT` (each with or
 * without the `application/` prefix, RFC 7515 section 4.1.9), or none, as most identity providers
 * issue them.
 */
const ACCESS_TOKEN_TYPES: ReadonlySet<string> = new Set(['jwt', 'application/jwt', 'at+jwt', 'application/at+jwt']);

/**
 * Why a token's `typ` header says it is some other kind of JWT the same identity provider signs
 * with the same keys (a DPoP proof `dpop+jwt`, a logout token `logout+jwt`, a security event
 * `secevent+jwt`…), or undefined. Such a token carries `iss`, `sub` and often `aud` too; accepting
 * it as a bearer token is the token confusion RFC 8725 (section 3.11) warns of.
 */
function typeProblem(typ: string | undefined, required: 'at+jwt' | undefined): string | undefined {
  if (required) {
    const lower = typ?.toLowerCase();
    return lower === 'at+jwt' || lower === 'application/at+jwt' ? undefined : `the token's typ header is ${typ === undefined ? 'missing' : JSON.stringify(typ.slice(0, 40))}; only access tokens typed at+jwt (RFC 9068) are accepted`;
  }
  if (typ === undefined || ACCESS_TOKEN_TYPES.has(typ.toLowerCase())) return undefined;
  return `the token's typ header ${JSON.stringify(typ.slice(0, 40))} is not that of an access token (JWT or at+jwt)`;
}

/** Why a token's `iat`/`exp` make it unacceptable however well it is signed, or undefined. */
function lifetimeProblem(payload: JWTPayload, { nowS, maxLifetimeS, clockTolerance }: { nowS: number; maxLifetimeS: number; clockTolerance: number }): string | undefined {
  const { iat, exp } = payload;
  if (iat !== undefined && iat > nowS + clockTolerance) return 'the token\'s iat claim is in the future';
  const lifetime = (exp ?? 0) - (iat ?? nowS);
  if (lifetime > maxLifetimeS) return `the token is valid for ${Math.round(lifetime)} s, longer than the ${maxLifetimeS} s accepted`;
  return undefined;
}

const isFetchFailure = (error: unknown) => error instanceof TypeError && /fetch/i.test(error.message);

/** A message for the client: what is wrong with the token, never the key material. */
function describe(error: unknown): string {
  if (error instanceof errors.JWTExpired) return 'the token has expired';
  if (error instanceof errors.JWTClaimValidationFailed) return `the token's ${error.claim} claim is not acceptable (${error.reason})`;
  if (error instanceof errors.JWSSignatureVerificationFailed) return 'the token\'s signature does not verify';
  if (error instanceof errors.JOSEAlgNotAllowed) return 'the token\'s algorithm is not accepted';
  if (error instanceof errors.JWKSNoMatchingKey) return 'no configured key matches the token';
  if (error instanceof errors.JWSInvalid || error instanceof errors.JWTInvalid) return 'the token is malformed';
  if (error instanceof errors.JOSEError) return `the token is not acceptable (${error.code})`;
  return 'the token is not acceptable';
}
