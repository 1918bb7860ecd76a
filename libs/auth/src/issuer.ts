import { exportJWK, generateKeyPair, importJWK, SignJWT, calculateJwkThumbprint, type JSONWebKeySet, type JWK } from 'jose';
import { claimFor, LABELFLOW_CLAIM, type ProjectRole } from './principal';
import { SYMMETRIC_ALGORITHM } from './verifier';

/** A private signing key as a JWK (with `kid` and `alg`), or a development shared secret. */
export type SigningKey = { readonly jwk: JWK } | { readonly secret: string };

export interface TokenRequest {
  readonly issuer: string;
  readonly audience: string;
  readonly subject: string;
  readonly admin?: boolean;
  readonly projects?: Readonly<Record<string, ProjectRole | readonly ProjectRole[]>>;
  /** Lifetime in seconds. Default 3600. */
  readonly ttlS?: number;
  /** Issue time; tests move it to produce expired or not-yet-valid tokens. */
  readonly now?: Date;
}

/**
 * Issues a token the services accept. labelflow is a resource server: in production an identity
 * provider issues tokens; this is for the local signing key (`npm run token`), tools and tests.
 */
export async function issueToken(key: SigningKey, request: TokenRequest): Promise<string> {
  const iat = Math.floor((request.now ?? new Date()).getTime() / 1000);
  const jwt = new SignJWT({ [LABELFLOW_CLAIM]: claimFor(request) })
    .setIssuer(request.issuer)
    .setAudience(request.audience)
    .setSubject(request.subject)
    .setIssuedAt(iat)
    .setNotBefore(iat)
    .setExpirationTime(iat + (request.ttlS ?? 3600))
    .setJti(crypto.randomUUID());
  if ('secret' in key) return jwt.setProtectedHeader({ alg: SYMMETRIC_ALGORITHM, typ: 'JWT' }).sign(new TextEncoder().encode(key.secret));
  const alg = key.jwk.alg ?? 'EdDSA';
  return jwt.setProtectedHeader({ alg, typ: 'JWT', ...(key.jwk.kid ? { kid: key.jwk.kid } : {}) }).sign(await importJWK(key.jwk, alg));
}

export interface GeneratedKey {
  /** Private: keep it where only the issuer reads it. */
  readonly privateJwk: JWK;
  /** Public: what the services are configured with (`AUTH_PUBLIC_KEYS`). */
  readonly publicJwks: JSONWebKeySet;
}

/** A new Ed25519 key pair, its `kid` the RFC 7638 thumbprint. */
export async function generateSigningKey(): Promise<GeneratedKey> {
  const { privateKey, publicKey } = await generateKeyPair('EdDSA', { crv: 'Ed25519', extractable: true });
  const pub = await exportJWK(publicKey);
  const kid = await calculateJwkThumbprint(pub);
  const meta = { kid, alg: 'EdDSA', use: 'sig' };
  return { privateJwk: { ...(await exportJWK(privateKey)), ...meta }, publicJwks: { keys: [{ ...pub, ...meta }] } };
}

/** The public half of a private JWK. */
export function publicJwksOf(privateJwk: JWK): JSONWebKeySet {
  const { d: _d, p: _p, q: _q, dp: _dp, dq: _dq, qi: _qi, ...pub } = privateJwk;
  return { keys: [pub] };
}
