import Fastify from 'fastify';
import { describe, expect, it } from 'vitest';
import { AuthError, AuthErrors } from './errors';
import { generateSigningKey, issueToken } from './issuer';
import { installAuth } from './plugin';
import { createRateLimiter } from './rate-limit';
import { createTokenVerifier, type TokenVerifier } from './verifier';

const issuer = 'https://idp.test';
const audience = 'labelflow';

async function app(options: { verifier?: TokenVerifier; perSecond?: number; burst?: number } = {}) {
  const { privateJwk, publicJwks } = await generateSigningKey();
  const verifier = options.verifier ?? createTokenVerifier({ issuer, audience, jwks: publicJwks });
  const server = Fastify();
  installAuth(server, { verifier, ...(options.perSecond ? { rateLimiter: createRateLimiter({ namespace: 't', perSecond: options.perSecond, burst: options.burst ?? 1 }) } : {}) });
  server.get('/healthz', async () => ({ ok: true }));
  server.post('/things', async (request) => ({ subject: request.principal.subject, body: request.body }));
  const token = (subject = 'alice') => issueToken({ jwk: privateJwk }, { issuer, audience, subject });
  return { server, token };
}

describe('the authentication hook', () => {
  it('answers 401 TOKEN_MISSING with a bare Bearer challenge when no token is sent', async () => {
    const { server } = await app();
    const res = await server.inject({ method: 'POST', url: '/things', payload: { a: 1 } });
    expect(res.statusCode).toBe(401);
    expect(res.headers['www-authenticate']).toBe('Bearer realm="labelflow"');
    expect(res.json()).toEqual({ error: { code: 'TOKEN_MISSING', message: 'send Authorization: Bearer <token>' } });
  });

  it('answers 401 invalid_request for a header that is not a bearer JWT, and invalid_token for a bad token', async () => {
    const { server } = await app();
    const basic = await server.inject({ method: 'POST', url: '/things', headers: { authorization: 'Basic YWxpY2U6cHc=' } });
    expect(basic.statusCode).toBe(401);
    expect(basic.headers['www-authenticate']).toMatch(/error="invalid_request"/);
    const other = await app();
    const foreign = await server.inject({ method: 'POST', url: '/things', headers: { authorization: `Bearer ${await other.token()}` } });
    expect(foreign.statusCode).toBe(401);
    expect(foreign.headers['www-authenticate']).toMatch(/error="invalid_token", error_description="/);
    expect(foreign.json().error.code).toBe('TOKEN_INVALID');
  });

  it('keeps the challenge to printable ASCII when the refusal quotes claims in other scripts or control characters, so it stays a 401', async () => {
    const message = 'the labelflow claim names an unknown project "日本語" (é)\r\n\u0000' + 'x'.repeat(1_000);
    const verifier: TokenVerifier = { verify: async () => ({ ok: false, reason: { code: AuthErrors.TOKEN_INVALID, message } }) };
    const { server } = await app({ verifier });
    // Over a real socket: Node refuses such a header when it writes it, which inject would not show.
    const url = await server.listen({ port: 0, host: '127.0.0.1' });
    try {
      const res = await fetch(`${url}/things`, { method: 'POST', headers: { authorization: 'Bearer a.b.c' } });
      expect(res.status).toBe(401);
      const challenge = res.headers.get('www-authenticate') ?? '';
      expect(challenge).toMatch(/^Bearer realm="labelflow", error="invalid_token", error_description="the labelflow claim names an unknown project \?\?\? \(\?\)\?\?\?x+"$/);
      expect(challenge.length).toBeLessThan(400);
      expect(((await res.json()) as { error: { message: string } }).error.message).toBe(message);
    } finally {
      await server.close();
    }
  });

  it('sets the principal before the route runs and serves probes without a token', async () => {
    const { server, token } = await app();
    const res = await server.inject({ method: 'POST', url: '/things', headers: { authorization: `Bearer ${await token('bob')}` }, payload: { a: 1 } });
    expect(res.json()).toEqual({ subject: 'bob', body: { a: 1 } });
    expect((await server.inject({ method: 'GET', url: '/healthz' })).statusCode).toBe(200);
  });

  it('answers 429 RATE_LIMITED with Retry-After once a subject spends its burst, others unaffected', async () => {
    const { server, token } = await app({ perSecond: 0.5, burst: 2 });
    const as = async (subject: string) => server.inject({ method: 'POST', url: '/things', headers: { authorization: `Bearer ${await token(subject)}` } });
    expect((await as('alice')).statusCode).toBe(200);
    expect((await as('alice')).statusCode).toBe(200);
    const limited = await as('alice');
    expect(limited.statusCode).toBe(429);
    expect(limited.headers['retry-after']).toBe('2');
    expect(limited.json().error.code).toBe('RATE_LIMITED');
    expect((await as('bob')).statusCode).toBe(200);
  });

  it('answers 503 with Retry-After when the identity provider\'s keys cannot be fetched', async () => {
    const unreachable: TokenVerifier = {
      verify: async () => {
        throw new AuthError(AuthErrors.KEYS_UNAVAILABLE, 'the identity provider\'s keys could not be fetched', { retriable: true });
      },
    };
    const { server, token } = await app({ verifier: unreachable });
    const res = await server.inject({ method: 'POST', url: '/things', headers: { authorization: `Bearer ${await token()}` } });
    expect(res.statusCode).toBe(503);
    expect(res.headers['retry-after']).toBe('1');
  });
});
