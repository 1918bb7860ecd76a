import { createServer, type IncomingHttpHeaders, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { createTokenVerifier, DEV_AUDIENCE, DEV_ISSUER, generateSigningKey } from '@labelflow/auth';
import { client } from './http';
import { adminOf, castFor, signerFor } from './identity';

/** A server answering each request with the next of `answers` (the last one repeats), recording what it got. */
async function serve(answers: readonly { status: number; body: unknown; headers?: Record<string, string> }[]) {
  const seen: IncomingHttpHeaders[] = [];
  const server: Server = createServer((req, res) => {
    seen.push(req.headers);
    const answer = answers[Math.min(seen.length, answers.length) - 1] ?? { status: 500, body: {} };
    req.resume();
    req.on('end', () => res.writeHead(answer.status, { 'content-type': 'application/json', ...answer.headers }).end(JSON.stringify(answer.body)));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, seen, close: () => new Promise<void>((resolve) => server.close(() => resolve())) };
}

const limited = { status: 429, body: { error: { code: 'RATE_LIMITED', message: 'too many requests' } }, headers: { 'retry-after': '0' } };

describe('the producer client', () => {
  let close: (() => Promise<void>) | undefined;
  afterEach(async () => close?.());

  it('waits out 429 RATE_LIMITED and sends the same request again, same Idempotency-Key, without spending a retry', async () => {
    const server = await serve([limited, limited, { status: 201, body: { ok: true } }]);
    close = server.close;
    let requests = 0;
    let rateLimited = 0;
    const call = client(server.url, { retries: 0, authorization: () => 'Bearer a.b.c', onRequest: () => requests++, onRateLimited: () => rateLimited++ });
    const res = await call('POST', '/tasks', { title: 'x' });
    expect(res).toEqual({ status: 201, body: { ok: true } });
    expect({ requests, rateLimited }).toEqual({ requests: 3, rateLimited: 2 });
    expect(new Set(server.seen.map((h) => h['idempotency-key'])).size).toBe(1);
    expect(server.seen.every((h) => h.authorization === 'Bearer a.b.c')).toBe(true);
  });

  it('gives a 502 whose body is a proxy\'s HTML page back at once with its status, never taking it for a dropped connection', async () => {
    const server = createServer((req, res) => {
      req.resume();
      req.on('end', () => res.writeHead(502, { 'content-type': 'text/html' }).end('<html>Bad Gateway</html>'));
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    close = () => new Promise<void>((resolve) => server.close(() => resolve()));
    let requests = 0;
    const call = client(`http://127.0.0.1:${(server.address() as AddressInfo).port}`, { retries: 5, onRequest: () => requests++ });
    expect(await call('POST', '/tasks', { title: 'x' })).toEqual({ status: 502, body: '<html>Bad Gateway</html>' });
    expect(requests).toBe(1);
  });

  it('sends a 503 again with the same Idempotency-Key, spending a retry, and counts it', async () => {
    const unavailableAnswer = { status: 503, body: { error: { code: 'SERVICE_UNAVAILABLE', message: 'database unavailable' } }, headers: { 'retry-after': '0' } };
    const server = await serve([unavailableAnswer, { status: 201, body: { ok: true } }]);
    close = server.close;
    let unavailable = 0;
    const call = client(server.url, { retries: 1, authorization: () => 'Bearer a.b.c', onUnavailable: () => unavailable++ });
    expect(await call('POST', '/tasks', { title: 'x' })).toEqual({ status: 201, body: { ok: true } });
    expect(unavailable).toBe(1);
    expect(new Set(server.seen.map((h) => h['idempotency-key'])).size).toBe(1);
  });

  it('gives the 429 back once it has waited rateLimitWaitMs, even when Retry-After is 0 and the jitter draws 0', async () => {
    const server = await serve([limited]);
    close = server.close;
    // The jitter's lowest draw: before, a wait of 0 ms counted nothing against the budget.
    vi.spyOn(Math, 'random').mockReturnValue(0);
    const res = await client(server.url, { rateLimitWaitMs: 1 })('GET', '/tasks/1').finally(() => vi.restoreAllMocks());
    expect(res.status).toBe(429);
    expect(server.seen).toHaveLength(2);
  });
});

describe('the simulated users', () => {
  it('carry tokens the services accept: admin without projects, the others with their role in every project of the run', async () => {
    const { privateJwk, publicJwks } = await generateSigningKey();
    const verifier = createTokenVerifier({ issuer: DEV_ISSUER, audience: DEV_AUDIENCE, jwks: publicJwks });
    const signer = signerFor({ jwk: privateJwk });
    const projects = ['0b7e3a52-5f43-4c4e-9c5e-1f0f8a3c2d11', '6f1c2b9e-8d7a-4e3f-b2a1-0c9d8e7f6a5b'];
    const cast = castFor(signer, adminOf(signer), projects, { annotators: 2 });
    const principal = async (authorization: () => Promise<string>) => {
      const verified = await verifier.verify((await authorization()).replace(/^Bearer /, ''));
      if (!verified.ok) throw new Error(verified.reason.message);
      return { subject: verified.value.subject, admin: verified.value.admin, roles: [...verified.value.projects].map(([p, r]) => [p, [...r]]) };
    };
    expect(await principal(cast.admin.authorization)).toEqual({ subject: 'producer-admin', admin: true, roles: [] });
    expect(await principal(cast.annotators[1]!.authorization)).toEqual({ subject: 'annotator-1', admin: false, roles: projects.map((p) => [p, ['annotator']]) });
    expect(await principal(cast.reviewers[0]!.authorization)).toEqual({ subject: 'reviewer-0', admin: false, roles: projects.map((p) => [p, ['reviewer']]) });
    expect(cast.managers.map((m) => m.subject)).toEqual(['manager-0', 'manager-1', 'manager-2', 'manager-3']);
    // Issued once and reused until half its lifetime has passed.
    expect(await cast.admin.authorization()).toBe(await cast.admin.authorization());
  });
});
