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
