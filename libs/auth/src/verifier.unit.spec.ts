import { exportJWK, generateKeyPair, importJWK, SignJWT, UnsecuredJWT } from 'jose';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { describe, expect, it, vi } from 'vitest';
import { AuthError } from './errors';
import { generateSigningKey, issueToken } from './issuer';
import { createTokenVerifier } from './verifier';

const issuer = 'https://idp.test';
const audience = 'labelflow';
const project = '6f1c2a34-7d8e-4f90-a1b2-c3d4e5f60718';

describe('token verification', async () => {
  const { privateJwk, publicJwks } = await generateSigningKey();
  const verifier = createTokenVerifier({ issuer, audience, jwks: publicJwks });
  const sign = (overrides: Partial<Parameters<typeof issueToken>[1]> = {}) => issueToken({ jwk: privateJwk }, { issuer, audience, subject: 'alice', projects: { [project]: 'annotator' }, ...overrides });

  it('accepts a token signed by a configured key and reads the subject and roles from it', async () => {
    const result = await verifier.verify(await sign());
    expect(result.ok).toBe(true);
    if (!result.ok) return;
    expect(result.value.subject).toBe('alice');
    expect(result.value.admin).toBe(false);
    expect([...(result.value.projects.get(project as never) ?? [])]).toEqual(['annotator']);
  });

  it('refuses a token from another issuer, for another audience, expired, or not yet valid', async () => {
    const hourAgo = new Date(Date.now() - 3600_000 - 60_000);
    const later = new Date(Date.now() + 120_000);
    for (const token of [await sign({ issuer: 'https://evil.test' }), await sign({ audience: 'other' }), await sign({ now: hourAgo, ttlS: 3600 }), await sign({ now: later })]) {
      const result = await verifier.verify(token);
      expect(result.ok, token).toBe(false);
    }
  });

  it('remembers a verified token only until it expires', async () => {
    let now = Date.now();
    const cached = createTokenVerifier({ issuer, audience, jwks: publicJwks, clockToleranceS: 0, nowMs: () => now });
    const token = await sign({ ttlS: 60 });
    expect((await cached.verify(token)).ok).toBe(true);
    expect((await cached.verify(token)).ok).toBe(true);
    now += 61_000;
    const result = await cached.verify(token);
    expect(result.ok).toBe(false);
    if (!result.ok) expect(result.reason.message).toBe('the token has expired');
  });

  it('refuses a token that claims to be valid for longer than the accepted lifetime, however well signed', async () => {
    const day = await verifier.verify(await sign({ ttlS: 86_400 }));
    expect(day.ok).toBe(true);
    const century = await verifier.verify(await sign({ ttlS: 100 * 365 * 86_400 }));
    expect(century).toEqual({ ok: false, reason: { code: 'TOKEN_INVALID', message: 'the token is valid for 3153600000 s, longer than the 86400 s accepted' } });
    const strict = createTokenVerifier({ issuer, audience, jwks: publicJwks, maxLifetimeS: 3_600 });
    expect((await strict.verify(await sign({ ttlS: 3_600 }))).ok).toBe(true);
    expect((await strict.verify(await sign({ ttlS: 3_601 }))).ok).toBe(false);
  });

  it('judges a token without iat by the time it has left, and refuses an iat in the future', async () => {
    const key = await importJWK(privateJwk, 'EdDSA');
    const nowS = Math.floor(Date.now() / 1000);
    /** Signed by the configured key, with exactly the time claims given (no nbf). */
    const token = (times: { iat?: number; exp: number }) => {
      const jwt = new SignJWT({ labelflow: { projects: {} } }).setProtectedHeader({ alg: 'EdDSA', kid: privateJwk.kid as string }).setIssuer(issuer).setAudience(audience).setSubject('alice').setExpirationTime(times.exp);
      return (times.iat === undefined ? jwt : jwt.setIssuedAt(times.iat)).sign(key);
    };
    expect((await verifier.verify(await token({ exp: nowS + 3_600 }))).ok).toBe(true);
    expect(await verifier.verify(await token({ exp: nowS + 2 * 86_400 }))).toMatchObject({ ok: false, reason: { message: expect.stringMatching(/^the token is valid for \d+ s, longer than the 86400 s accepted$/) } });
    expect(await verifier.verify(await token({ iat: nowS + 3_600, exp: nowS + 7_200 }))).toEqual({ ok: false, reason: { code: 'TOKEN_INVALID', message: 'the token\'s iat claim is in the future' } });
    expect((await verifier.verify(await token({ iat: nowS + 10, exp: nowS + 3_600 }))).ok).toBe(true);
  });

  it('accepts a token typed JWT, at+jwt or not typed at all, and refuses another kind of JWT the same key signed', async () => {
    const key = await importJWK(privateJwk, 'EdDSA');
    const typed = (typ: string | undefined) =>
      new SignJWT({ labelflow: { projects: {} } })
        .setProtectedHeader({ alg: 'EdDSA', kid: privateJwk.kid as string, ...(typ === undefined ? {} : { typ }) })
        .setIssuer(issuer)
        .setAudience(audience)
        .setSubject('alice')
        .setIssuedAt()
        .setExpirationTime('10m')
        .sign(key);
    for (const typ of [undefined, 'JWT', 'jwt', 'application/jwt', 'at+jwt', 'application/at+JWT']) expect((await verifier.verify(await typed(typ))).ok, String(typ)).toBe(true);
    for (const typ of ['dpop+jwt', 'logout+jwt', 'secevent+jwt']) {
      expect(await verifier.verify(await typed(typ))).toEqual({ ok: false, reason: { code: 'TOKEN_INVALID', message: `the token's typ header "${typ}" is not that of an access token (JWT or at+jwt)` } });
    }
    // Told to, it takes only RFC 9068 access tokens: an ID token (no typ, or JWT) is refused.
    const strict = createTokenVerifier({ issuer, audience, jwks: publicJwks, requiredType: 'at+jwt' });
    for (const typ of ['at+jwt', 'application/at+JWT']) expect((await strict.verify(await typed(typ))).ok, typ).toBe(true);
    expect(await strict.verify(await typed(undefined))).toEqual({ ok: false, reason: { code: 'TOKEN_INVALID', message: 'the token\'s typ header is missing; only access tokens typed at+jwt (RFC 9068) are accepted' } });
    expect((await strict.verify(await typed('JWT'))).ok).toBe(false);
  });

  it('stops accepting a remembered token within two minutes once its key is gone from the identity provider\'s key set', async () => {
    vi.useFakeTimers({ toFake: ['Date'] });
    try {
      let keys = publicJwks;
      const idp = createServer((_req, res) => void res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(keys)));
      await new Promise<void>((resolve) => idp.listen(0, '127.0.0.1', resolve));
      const remote = createTokenVerifier({ issuer, audience, jwksUrl: `http://127.0.0.1:${(idp.address() as AddressInfo).port}/jwks.json`, jwksTimeoutMs: 2_000 });
      const token = await sign({ ttlS: 3_600 });
      expect((await remote.verify(token)).ok).toBe(true);

      keys = (await generateSigningKey()).publicJwks; // the key is rotated out
      vi.setSystemTime(Date.now() + 2 * 60_000); // past the key set's one-minute cache and the verified-token cache, well within the token's hour
      const after = await remote.verify(token);
      await new Promise((resolve) => idp.close(resolve));
      expect(after).toEqual({ ok: false, reason: { code: 'TOKEN_INVALID', message: 'no configured key matches the token' } });
    } finally {
      vi.useRealTimers();
    }
  });

  it('keeps verifying with the last key set fetched while the identity provider\'s endpoint is down, for a bounded time, and never vouches for a key it has not seen', async () => {
    vi.useFakeTimers({ toFake: ['Date'] });
    try {
      let up = true;
      let served = 0;
      const idp = createServer((_req, res) => {
        served += 1;
        if (up) res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(publicJwks));
        else res.writeHead(503).end('down');
      });
      await new Promise<void>((resolve) => idp.listen(0, '127.0.0.1', resolve));
      const stale: number[] = [];
      const remote = createTokenVerifier({
        issuer,
        audience,
        jwksUrl: `http://127.0.0.1:${(idp.address() as AddressInfo).port}/jwks.json`,
        jwksTimeoutMs: 2_000,
        jwksStaleMaxMs: 10 * 60_000,
        onStaleKeys: (_error, ageMs) => stale.push(ageMs),
      });
      expect((await remote.verify(await sign())).ok).toBe(true);
      up = false;

      vi.setSystemTime(Date.now() + 61_000); // the set is past its one-minute cache: jose alone would fail here
      expect((await remote.verify(await sign({ subject: 'bob' }))).ok).toBe(true);
      await vi.waitFor(() => expect(stale).toHaveLength(1)); // the fetch behind it failed, once
      // Within the cool-down after the failed fetch the endpoint is not asked again per request.
      const asked = served;
      expect((await remote.verify(await sign({ subject: 'carol' }))).ok).toBe(true);
      expect(served).toBe(asked);
      // A key the stale set lacks may be one the provider added meanwhile: unavailable, not invalid.
      const newcomer = await generateSigningKey();
      const unseen = await remote.verify(await issueToken({ jwk: newcomer.privateJwk }, { issuer, audience, subject: 'dave' })).catch((e: unknown) => e);
      expect(unseen).toBeInstanceOf(AuthError);
      expect((unseen as AuthError).code).toBe('AUTH_KEYS_UNAVAILABLE');

      vi.setSystemTime(Date.now() + 10 * 60_000); // past the stale bound
      const late = await remote.verify(await sign({ subject: 'erin' })).catch((e: unknown) => e);
      expect(late).toBeInstanceOf(AuthError);
      expect((late as AuthError).retriable).toBe(true);

      up = true; // back: the endpoint is asked again and answers
      vi.setSystemTime(Date.now() + 31_000);
      expect((await remote.verify(await sign({ subject: 'frank' }))).ok).toBe(true);
      await new Promise((resolve) => idp.close(resolve));
    } finally {
      vi.useRealTimers();
    }
  });

  it('answers from the key set in hand while a fetch of the endpoint hangs, instead of holding the request for the fetch\'s timeout', async () => {
    vi.useFakeTimers({ toFake: ['Date'] });
    const held: import('node:http').ServerResponse[] = [];
    let hang = false;
    const idp = createServer((_req, res) => {
      if (hang) held.push(res); // never answered while the test runs
      else res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(publicJwks));
    });
    try {
      await new Promise<void>((resolve) => idp.listen(0, '127.0.0.1', resolve));
      const remote = createTokenVerifier({ issuer, audience, jwksUrl: `http://127.0.0.1:${(idp.address() as AddressInfo).port}/jwks.json`, jwksTimeoutMs: 60_000 });
      expect((await remote.verify(await sign())).ok).toBe(true);
      hang = true;
      vi.setSystemTime(Date.now() + 61_000);
      // Answered while the endpoint still holds the fetch this lookup started: not after it.
      expect((await remote.verify(await sign({ subject: 'bob' }))).ok).toBe(true);
      await vi.waitFor(() => expect(held).toHaveLength(1));
      expect((await remote.verify(await sign({ subject: 'carol' }))).ok).toBe(true);
      expect(held).toHaveLength(1); // one fetch at a time
    } finally {
      for (const res of held) res.destroy();
      idp.closeAllConnections();
      await new Promise((resolve) => idp.close(resolve));
      vi.useRealTimers();
    }
  });

  it('refuses a stale key set bound that is not a whole number of milliseconds', () => {
    expect(() => createTokenVerifier({ issuer, audience, jwksUrl: 'https://idp.test/jwks.json', jwksStaleMaxMs: -1 })).toThrow(/jwksStaleMaxMs/);
  });

  it('allows a small clock skew on expiry and not-before', async () => {
    const justExpired = await sign({ now: new Date(Date.now() - 3600_000 - 10_000), ttlS: 3600 });
    const slightlyAhead = await sign({ now: new Date(Date.now() + 10_000) });
    expect((await verifier.verify(justExpired)).ok).toBe(true);
    expect((await verifier.verify(slightlyAhead)).ok).toBe(true);
  });

  it('refuses a token signed by a key that is not configured', async () => {
    const other = await generateSigningKey();
    const forged = await issueToken({ jwk: { ...other.privateJwk, kid: privateJwk.kid } }, { issuer, audience, subject: 'mallory', admin: true });
    const result = await verifier.verify(forged);
    expect(result.ok).toBe(false);
  });

  it('refuses unsigned tokens and HS256 tokens when no shared secret is configured', async () => {
    const unsigned = new UnsecuredJWT({ sub: 'mallory', labelflow: { admin: true } }).setIssuer(issuer).setAudience(audience).setExpirationTime('1h').encode();
    expect((await verifier.verify(unsigned)).ok).toBe(false);
    // The classic confusion: the public key's bytes used as an HMAC secret.
    const hmac = await new SignJWT({ labelflow: { admin: true } }).setProtectedHeader({ alg: 'HS256' }).setSubject('mallory').setIssuer(issuer).setAudience(audience).setExpirationTime('1h').sign(new TextEncoder().encode(JSON.stringify(publicJwks.keys[0])));
    const result = await verifier.verify(hmac);
    expect(result.ok).toBe(false);
    if (!result.ok) expect(result.reason.message).toMatch(/algorithm/);
  });

  it('refuses a token without an expiry or a subject, or with a malformed labelflow claim', async () => {
    const key = privateJwk;
    const { importJWK } = await import('jose');
    const signer = await importJWK(key, 'EdDSA');
    const noExp = await new SignJWT({}).setProtectedHeader({ alg: 'EdDSA', kid: key.kid! }).setSubject('alice').setIssuer(issuer).setAudience(audience).sign(signer);
    const noSub = await new SignJWT({}).setProtectedHeader({ alg: 'EdDSA', kid: key.kid! }).setIssuer(issuer).setAudience(audience).setExpirationTime('1h').sign(signer);
    const badClaim = await new SignJWT({ labelflow: { projects: { 'not-a-uuid': 'owner' } } }).setProtectedHeader({ alg: 'EdDSA', kid: key.kid! }).setSubject('alice').setIssuer(issuer).setAudience(audience).setExpirationTime('1h').sign(signer);
    const badRole = await new SignJWT({ labelflow: { projects: { [project]: 'god' } } }).setProtectedHeader({ alg: 'EdDSA', kid: key.kid! }).setSubject('alice').setIssuer(issuer).setAudience(audience).setExpirationTime('1h').sign(signer);
    const badSub = await new SignJWT({}).setProtectedHeader({ alg: 'EdDSA', kid: key.kid! }).setSubject('bad subject!').setIssuer(issuer).setAudience(audience).setExpirationTime('1h').sign(signer);
    for (const token of [noExp, noSub, badClaim, badRole, badSub]) expect((await verifier.verify(token)).ok).toBe(false);
  });

  it('accepts RS256 and ES256 keys from the same key set', async () => {
    const rsa = await generateKeyPair('RS256', { extractable: true });
    const ec = await generateKeyPair('ES256', { extractable: true });
    const jwks = { keys: [{ ...(await exportJWK(rsa.publicKey)), kid: 'rsa', alg: 'RS256' }, { ...(await exportJWK(ec.publicKey)), kid: 'ec', alg: 'ES256' }] };
    const multi = createTokenVerifier({ issuer, audience, jwks });
    for (const [alg, kid, key] of [['RS256', 'rsa', rsa.privateKey], ['ES256', 'ec', ec.privateKey]] as const) {
      const token = await new SignJWT({}).setProtectedHeader({ alg, kid }).setSubject('bob').setIssuer(issuer).setAudience(audience).setExpirationTime('1h').sign(key);
      expect((await multi.verify(token)).ok, alg).toBe(true);
    }
  });

  it('accepts a token without a kid while two keys of its type are published (a rotation), and only one either key signed', async () => {
    const [before, after, stranger] = await Promise.all([generateKeyPair('ES256', { extractable: true }), generateKeyPair('ES256', { extractable: true }), generateKeyPair('ES256', { extractable: true })]);
    const jwks = { keys: [{ ...(await exportJWK(before.publicKey)), alg: 'ES256' }, { ...(await exportJWK(after.publicKey)), alg: 'ES256' }] };
    const rotating = createTokenVerifier({ issuer, audience, jwks });
    const signedBy = (key: Parameters<SignJWT['sign']>[0]) => new SignJWT({}).setProtectedHeader({ alg: 'ES256' }).setSubject('bob').setIssuer(issuer).setAudience(audience).setExpirationTime('1h').sign(key);
    for (const key of [before.privateKey, after.privateKey]) expect((await rotating.verify(await signedBy(key))).ok).toBe(true);
    expect(await rotating.verify(await signedBy(stranger.privateKey))).toEqual({ ok: false, reason: { code: 'TOKEN_INVALID', message: "the token's signature does not verify" } });
  });

  it('accepts HS256 only with an explicitly configured shared secret of at least 32 bytes', async () => {
    expect(() => createTokenVerifier({ issuer, audience, sharedSecret: 'short' })).toThrow(AuthError);
    const secret = 'x'.repeat(32);
    const dev = createTokenVerifier({ issuer, audience, sharedSecret: secret });
    expect((await dev.verify(await issueToken({ secret }, { issuer, audience, subject: 'dev' }))).ok).toBe(true);
    expect((await dev.verify(await issueToken({ secret: 'y'.repeat(32) }, { issuer, audience, subject: 'dev' }))).ok).toBe(false);
  });

  it('refuses settings without a key source or with private keys in the key set', async () => {
    expect(() => createTokenVerifier({ issuer, audience })).toThrow(/no key source/);
    expect(() => createTokenVerifier({ issuer, audience, jwks: { keys: [privateJwk] } })).toThrow(/private key/);
  });

  it('fetches an identity provider\'s JWKS by URL, and reports it as unavailable (retriable) when the endpoint is down', async () => {
    let served = 0;
    const idp = createServer((_req, res) => {
      served += 1;
      res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(publicJwks));
    });
    await new Promise<void>((resolve) => idp.listen(0, '127.0.0.1', resolve));
    const url = `http://127.0.0.1:${(idp.address() as AddressInfo).port}/jwks.json`;
    const remote = createTokenVerifier({ issuer, audience, jwksUrl: url, jwksTimeoutMs: 500 });
    expect((await remote.verify(await sign())).ok).toBe(true);
    expect((await remote.verify(await sign({ subject: 'bob' }))).ok).toBe(true);
    expect(served).toBe(1);
    // An endpoint that answers, but not with keys: the token is not to blame.
    const broken = createServer((_req, res) => void res.writeHead(503).end('down for maintenance'));
    await new Promise<void>((resolve) => broken.listen(0, '127.0.0.1', resolve));
    const failing = createTokenVerifier({ issuer, audience, jwksUrl: `http://127.0.0.1:${(broken.address() as AddressInfo).port}/jwks.json`, jwksTimeoutMs: 500 });
    const refused = await failing.verify(await sign()).catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(AuthError);
    expect((refused as AuthError).code).toBe('AUTH_KEYS_UNAVAILABLE');
    await new Promise((resolve) => broken.close(resolve));
    await new Promise((resolve) => idp.close(resolve));
    const cold = createTokenVerifier({ issuer, audience, jwksUrl: url, jwksTimeoutMs: 500 });
    const error = await cold.verify(await sign()).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(AuthError);
    expect((error as AuthError).retriable).toBe(true);
  });
});
