import { connect } from 'node:net';
import { beforeAll, describe, expect, it, vi } from 'vitest';
import { z } from 'zod';
import type { JWK } from 'jose';
import { createRateLimiter, createTokenVerifier, generateSigningKey, issueToken, type AuthHookOptions, type TokenRequest } from '@labelflow/auth';
import { createMetrics } from '@labelflow/telemetry';
import { HttpError, ServiceKitError } from './errors';
import { createHttpApp, parseInput, type HttpAppDeps } from './http';
import { captureLogs } from '@labelflow/testing';

const ISSUER = 'http-test-issuer';
const AUDIENCE = 'http-test';
const PROJECT = 'c6c7d0a2-1b2c-4d5e-8f90-abcdef012345';
let signingKey: JWK;
let otherKey: JWK;
let auth: AuthHookOptions;
beforeAll(async () => {
  const [key, other] = await Promise.all([generateSigningKey(), generateSigningKey()]);
  signingKey = key.privateJwk;
  otherKey = other.privateJwk;
  auth = { verifier: createTokenVerifier({ issuer: ISSUER, audience: AUDIENCE, jwks: key.publicJwks }) };
});

/** A token the app accepts unless `over` changes something about it (or `key` signs it). */
const token = (over: Partial<TokenRequest> = {}, key: JWK = signingKey) => issueToken({ jwk: key }, { issuer: ISSUER, audience: AUDIENCE, subject: 'ops-1', ...over });
const bearer = async (over: Partial<TokenRequest> = {}, key?: JWK) => ({ authorization: `Bearer ${await token(over, key)}` });
const app = (deps: Partial<HttpAppDeps> = {}) => createHttpApp({ logger: captureLogs({ service: 'test' }).logger, readiness: {}, auth, ...deps });

const Body = z.object({ title: z.string().min(1), tags: z.array(z.string()), owner: z.object({ email: z.email() }) });

const failure = (value: unknown, what?: string): HttpError => {
  try {
    parseInput(Body, value, what);
  } catch (error) {
    return error as HttpError;
  }
  throw new Error('expected parseInput to throw');
};

describe('service-kit: parseInput', () => {
  it('returns the parsed value when the input is valid', () => {
    expect(parseInput(Body, { title: 'Cats', tags: ['a'], owner: { email: 'a@b.co' } })).toEqual({ title: 'Cats', tags: ['a'], owner: { email: 'a@b.co' } });
  });

  it('throws a 400 VALIDATION_FAILED HttpError whose details name each bad path', () => {
    const error = failure({ title: '', tags: ['a', 'b', 7], owner: { email: 'nope' } });

    expect(error).toBeInstanceOf(HttpError);
    expect(error.status).toBe(400);
    expect(error.code).toBe('VALIDATION_FAILED');
    const paths = (error.details as { path: string }[]).map((d) => d.path);
    expect(paths).toEqual(['body.title', 'body.tags.2', 'body.owner.email']);
  });

  it('lists at most 20 problems of at most 300 characters each, and says how many more there were', () => {
    const Strict = z.object({ tags: z.array(z.number()) }).strict();
    const keys = Object.fromEntries(Array.from({ length: 5_000 }, (_, i) => [`unknown_key_${i}`, 1]));
    let error: HttpError | undefined;
    try {
      parseInput(Strict, { tags: Array.from({ length: 100 }, () => 'x'), ...keys });
    } catch (caught) {
      error = caught as HttpError;
    }
    const details = error?.details as { path: string; message: string }[];
    expect(details).toHaveLength(20);
    expect(details.every((d) => d.message.length <= 301 && d.path.length <= 301)).toBe(true);
    expect(error?.message).toMatch(/; and 81 more$/);
    expect(JSON.stringify(error?.details).length + (error?.message.length ?? 0)).toBeLessThan(20_000);
  });

  it('prefixes detail paths with what was parsed', () => {
    const error = failure({ tags: [], owner: { email: 'a@b.co' } }, 'query');

    expect(error.details).toEqual([expect.objectContaining({ path: 'query.title' })]);
    expect(error.message).toContain('invalid query');
  });
});

describe('createHttpApp shutdown', () => {
  it('closes promptly while a request is still running: its answer closes the keep-alive connection', async () => {
    const server = app();
    let entered!: () => void;
    const inRoute = new Promise<void>((resolve) => (entered = resolve));
    let release!: () => void;
    const released = new Promise<void>((resolve) => (release = resolve));
    server.get('/held', async () => {
      entered();
      await released;
      return { ok: true };
    });
    server.addHook('preClose', async () => release());
    const url = await server.listen({ port: 0, host: '127.0.0.1' });
    const answer = fetch(`${url}/held`, { headers: await bearer() });
    await inRoute;
    const closed = server.close();
    const res = await answer;
    expect([res.status, res.headers.get('connection')]).toEqual([200, 'close']);
    await res.text();
    // Without the header the server would wait for this keep-alive connection (fastify: 72 s).
    await closed;
  });

  it('keeps connections alive while the server runs', async () => {
    const server = app();
    const res = await server.inject({ url: '/healthz' });
    expect(res.headers.connection).not.toBe('close');
    await server.close();
  });
});

describe('createHttpApp errors', () => {
  it('answers 503 with the error code and Retry-After when a dependency is unavailable, 500 otherwise', async () => {
    const server = app();
    server.get('/down', async () => {
      throw new ServiceKitError('ID_UNAVAILABLE', 'lease lost', { retriable: true });
    });
    server.get('/pg-down', async () => {
      throw Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:5432'), { code: 'ECONNREFUSED' });
    });
    server.get('/bug', async () => {
      throw new TypeError('undefined is not a function');
    });
    const headers = await bearer();
    const down = await server.inject({ url: '/down', headers });
    expect([down.statusCode, down.headers['retry-after'], down.json().error.code]).toEqual([503, '1', 'ID_UNAVAILABLE']);
    const pg = await server.inject({ url: '/pg-down', headers });
    expect([pg.statusCode, pg.json().error.code]).toEqual([503, 'ECONNREFUSED']);
    const bug = await server.inject({ url: '/bug', headers });
    expect([bug.statusCode, bug.json().error.code]).toEqual([500, 'INTERNAL']);
    await server.close();
  });

  it('answers a malformed URL with the same JSON error shape as every other error', async () => {
    const server = app();
    server.get('/tasks/:id', async () => ({ ok: true }));
    const res = await server.inject({ url: '/tasks/%E0%A4%A', headers: await bearer() });
    expect([res.statusCode, res.json().error.code]).toEqual([400, 'BAD_REQUEST']);
    await server.close();
  });
});

describe('createHttpApp authentication', () => {
  /** An app with one route that counts its runs and answers with the caller it was given. */
  const withRoute = (deps: Partial<HttpAppDeps> = {}) => {
    const server = app(deps);
    const runs = { n: 0 };
    server.post('/cancel', async (request) => {
      runs.n++;
      const { subject, admin, projects } = request.principal;
      return { subject, admin, projects: Object.fromEntries([...projects].map(([id, roles]) => [id, [...roles]])) };
    });
    return { server, runs };
  };

  it('answers 401 TOKEN_MISSING with a Bearer challenge before the route runs when no token is sent', async () => {
    const { server, runs } = withRoute();
    const res = await server.inject({ method: 'POST', url: '/cancel', payload: { reason: 'x' } });
    expect([res.statusCode, res.json().error.code]).toEqual([401, 'TOKEN_MISSING']);
    expect(res.headers['www-authenticate']).toBe('Bearer realm="labelflow"');
    expect(runs.n).toBe(0);
    await server.close();
  });

  it('answers 401 TOKEN_INVALID with the reason in the challenge for a malformed header, a foreign signature, an expired token, another audience or a subject that could not travel in an event', async () => {
    const { server, runs } = withRoute();
    const hour = 3_600_000;
    const cases: [string, string, string][] = [
      ['not a bearer token', 'Basic b3BzOnNlY3JldA==', 'invalid_request'],
      ['not a JWT', 'Bearer not-a-jwt', 'invalid_request'],
      ['signed by another key', `Bearer ${await token({}, otherKey)}`, 'invalid_token'],
      ['expired', `Bearer ${await token({ now: new Date(Date.now() - 2 * hour), ttlS: 60 })}`, 'invalid_token'],
      ['for another audience', `Bearer ${await token({ audience: 'someone-else' })}`, 'invalid_token'],
      ['a subject too long for an event', `Bearer ${await token({ subject: 'a'.repeat(129), admin: true })}`, 'invalid_token'],
    ];
    for (const [what, authorization, error] of cases) {
      const res = await server.inject({ method: 'POST', url: '/cancel', headers: { authorization }, payload: { reason: 'x' } });
      expect([res.statusCode, res.json().error.code], what).toEqual([401, 'TOKEN_INVALID']);
      expect(res.headers['www-authenticate'], what).toMatch(new RegExp(`^Bearer realm="labelflow", error="${error}", error_description="[^"]+"$`));
    }
    expect(runs.n).toBe(0);
    await server.close();
  });

  it('runs the route for a verified token, with its subject, admin flag and project roles as the caller', async () => {
    const { server, runs } = withRoute();
    const res = await server.inject({ method: 'POST', url: '/cancel', headers: await bearer({ subject: 'ops@example.com', projects: { [PROJECT]: ['manager', 'annotator'] } }), payload: { reason: 'x' } });
    expect(res.statusCode, res.body).toBe(200);
    expect(res.json()).toEqual({ subject: 'ops@example.com', admin: false, projects: { [PROJECT]: ['manager', 'annotator'] } });
    expect(runs.n).toBe(1);
    await server.close();
  });

  it('logs each request it answers at info, but a passing probe or scrape only at debug', async () => {
    const logs = captureLogs({ service: 'test' });
    let up = true;
    const server = createHttpApp({ logger: logs.logger, readiness: { db: async () => (up ? 'ok' : Promise.reject(new Error('down'))) }, auth });
    server.get('/annotators/:annotatorId', async () => ({}));
    await server.inject({ method: 'GET', url: '/healthz' });
    await server.inject({ method: 'GET', url: '/readyz' });
    await server.inject({ method: 'GET', url: '/annotators/a', headers: await bearer({ admin: true }) });
    up = false;
    await server.inject({ method: 'GET', url: '/readyz' });
    const completed = () => logs.lines.filter((l) => l.msg === 'request completed').map((l) => `${(l.req as { url: string }).url} ${(l.res as { statusCode: number }).statusCode}`);
    expect(completed()).toEqual(['/annotators/a 200', '/readyz 503']);
  });

  it('answers /healthz and /readyz without a token', async () => {
    const server = app({ readiness: { postgres: async () => undefined } });
    const health = await server.inject({ url: '/healthz' });
    const ready = await server.inject({ url: '/readyz' });
    expect([health.statusCode, ready.statusCode, ready.json().status]).toEqual([200, 200, 'ready']);
    await server.close();
  });

  it('answers /readyz 503 for a probe that hangs, once its timeout has passed, and names the check', async () => {
    const server = app({ readiness: { postgres: async () => undefined, kafka: () => new Promise(() => undefined) }, readinessTimeoutMs: 50 });
    const ready = await server.inject({ url: '/readyz' });
    expect(ready.statusCode).toBe(503);
    expect(ready.json()).toEqual({ status: 'not ready', checks: { postgres: 'ok', kafka: 'down: no answer within 50 ms' } });
    await server.close();
  });

  it('answers /readyz 200 degraded when only a dependency the service can do without is down, and 503 once another one is', async () => {
    const redisDown = () => Promise.reject(new Error('Connection is closed.'));
    const degraded = app({ readiness: { postgres: async () => undefined, redis: redisDown }, readinessOptional: ['redis'] });
    const answer = await degraded.inject({ url: '/readyz' });
    expect([answer.statusCode, answer.json()]).toEqual([200, { status: 'degraded', checks: { postgres: 'ok', redis: 'down: Connection is closed.' } }]);
    await degraded.close();
    const both = app({ readiness: { postgres: () => Promise.reject(new Error('the database system is starting up')), redis: redisDown }, readinessOptional: ['redis'] });
    const refused = await both.inject({ url: '/readyz' });
    expect([refused.statusCode, refused.json().status]).toEqual([503, 'not ready']);
    await both.close();
  });

  it('keeps the network behind a service out of /readyz: addresses in a probe\'s error are replaced, and the log keeps them', async () => {
    const logs = captureLogs({ service: 'test' });
    const refused = () => Promise.reject(new Error('connect ECONNREFUSED 10.0.3.7:5432'));
    const server = app({ logger: logs.logger, readiness: { postgres: refused, redis: () => Promise.reject(new Error('getaddrinfo ENOTFOUND redis.internal')) } });
    const ready = await server.inject({ url: '/readyz' });
    expect(ready.json().checks).toEqual({ postgres: 'down: connect ECONNREFUSED <address>', redis: 'down: getaddrinfo ENOTFOUND <address>' });
    expect(ready.body).not.toMatch(/10\.0\.3\.7|redis\.internal/);
    expect(logs.lines.filter((l) => l.msg === 'readiness check fails').map((l) => (l.err as { message: string }).message)).toEqual(
      expect.arrayContaining(['connect ECONNREFUSED 10.0.3.7:5432', 'getaddrinfo ENOTFOUND redis.internal']),
    );
    await server.inject({ url: '/readyz' });
    expect(logs.lines.filter((l) => l.msg === 'readiness check fails')).toHaveLength(2);
    await server.close();
  });

  it('names what a server answered in /readyz by its code alone, since its text can name a user or a database, and logs the text', async () => {
    const logs = captureLogs({ service: 'test' });
    // The shapes node-postgres and ioredis give a server's error reply.
    const pgError = Object.assign(new Error('password authentication failed for user "labelflow"'), { name: 'error', severity: 'FATAL', code: '28P01' });
    const redisError = Object.assign(new Error('WRONGPASS invalid username-password pair or user is disabled.'), { name: 'ReplyError' });
    const server = app({ logger: logs.logger, readiness: { postgres: () => Promise.reject(pgError), redis: () => Promise.reject(redisError) } });
    const ready = await server.inject({ url: '/readyz' });
    expect(ready.json().checks).toEqual({ postgres: 'down: PostgreSQL 28P01', redis: 'down: Redis WRONGPASS' });
    expect(ready.body).not.toMatch(/labelflow|username/);
    expect(logs.lines.filter((l) => l.msg === 'readiness check fails').map((l) => (l.err as { message: string }).message).sort()).toEqual([pgError.message, redisError.message].sort());
    await server.close();
  });

  it('logs a check going down and coming back once each, however its reason changes in between', async () => {
    const logs = captureLogs({ service: 'test' });
    let calls = 0;
    let up = false;
    const consumer = async () => {
      calls++;
      if (!up) throw new Error(`the consumer has not consumed for ${calls * 100} ms`);
    };
    const server = app({ logger: logs.logger, readiness: { consumer } });
    for (let i = 0; i < 3; i++) expect((await server.inject({ url: '/readyz' })).json().checks.consumer).toBe(`down: the consumer has not consumed for ${(i + 1) * 100} ms`);
    up = true;
    await server.inject({ url: '/readyz' });
    await server.inject({ url: '/readyz' });
    expect(logs.lines.map((l) => l.msg).filter((m) => String(m).startsWith('readiness check'))).toEqual(['readiness check fails', 'readiness check passes again']);
    await server.close();
  });

  it('runs each probe once for /readyz requests that come together', async () => {
    let runs = 0;
    let answer!: () => void;
    const slow = () => {
      runs++;
      return new Promise<void>((resolve) => (answer = resolve));
    };
    const server = app({ readiness: { postgres: slow } });
    const requests = Array.from({ length: 20 }, () => server.inject({ url: '/readyz' }));
    await vi.waitFor(() => expect(runs).toBe(1));
    answer();
    const answers = await Promise.all(requests);
    expect(answers.map((a) => a.statusCode)).toEqual(Array.from({ length: 20 }, () => 200));
    expect(runs).toBe(1);
    const later = server.inject({ url: '/readyz' });
    await vi.waitFor(() => expect(runs).toBe(2));
    answer();
    expect((await later).statusCode).toBe(200);
    await server.close();
  });

  it('serves /metrics to platform admins only: 401 without a token, 403 FORBIDDEN to a project owner', async () => {
    const metrics = createMetrics({ service: 'http-test', defaults: false });
    metrics.counter('things_total', 'things', []).inc();
    const server = app({ metrics });
    const anonymous = await server.inject({ url: '/metrics' });
    expect([anonymous.statusCode, anonymous.json().error.code]).toEqual([401, 'TOKEN_MISSING']);
    const owner = await server.inject({ url: '/metrics', headers: await bearer({ subject: 'owner-1', projects: { [PROJECT]: 'owner' } }) });
    expect([owner.statusCode, owner.json().error.code]).toEqual([403, 'FORBIDDEN']);
    const admin = await server.inject({ url: '/metrics', headers: await bearer({ subject: 'ops-1', admin: true }) });
    expect(admin.statusCode).toBe(200);
    expect(admin.body).toContain('things_total');
    await server.close();
  });

  it('answers 429 RATE_LIMITED with Retry-After once a subject has spent its burst, and still serves other subjects', async () => {
    const rateLimiter = createRateLimiter({ namespace: 'http-test', perSecond: 1, burst: 2, nowMs: () => 1_700_000_000_000 });
    const { server, runs } = withRoute({ auth: { ...auth, rateLimiter } });
    const busy = await bearer({ subject: 'busy' });
    const answers = [];
    for (let i = 0; i < 3; i++) answers.push(await server.inject({ method: 'POST', url: '/cancel', headers: busy, payload: {} }));
    expect(answers.map((a) => a.statusCode)).toEqual([200, 200, 429]);
    expect([answers[2]!.json().error.code, answers[2]!.headers['retry-after']]).toEqual(['RATE_LIMITED', '1']);
    const other = await server.inject({ method: 'POST', url: '/cancel', headers: await bearer({ subject: 'quiet' }), payload: {} });
    expect(other.statusCode).toBe(200);
    expect(runs.n).toBe(3);
    await server.close();
  });
});

describe('service-kit: requests no route can read', () => {
  /** Sends raw bytes to a listening app and returns everything it answered before closing. */
  const raw = async (url: string, request: string): Promise<string> => {
    const { hostname, port } = new URL(url);
    return new Promise((resolve, reject) => {
      const socket = connect(Number(port), hostname, () => socket.write(request));
      let answer = '';
      socket.on('data', (chunk) => (answer += chunk.toString()));
      socket.on('close', () => resolve(answer));
      socket.on('error', reject);
    });
  };
  const listening = async (deps: Partial<HttpAppDeps> = {}) => {
    const server = app(deps);
    server.get('/annotators/:annotatorId', async (request) => ({ annotatorId: (request.params as { annotatorId: string }).annotatorId }));
    server.post('/echo', async (request) => request.body);
    return { server, url: await server.listen({ port: 0, host: '127.0.0.1' }) };
  };

  it('answers a header block over 64 KiB with 431 and the usual error body, and takes one of 20 KiB', async () => {
    const { server, url } = await listening();
    try {
      const big = await raw(url, `GET /annotators/a HTTP/1.1\r\nHost: x\r\nX-Pad: ${'p'.repeat(70_000)}\r\n\r\n`);
      expect(big).toMatch(/^HTTP\/1\.1 431 /);
      expect(JSON.parse(big.slice(big.indexOf('\r\n\r\n') + 4))).toEqual({ error: { code: 'HEADERS_TOO_LARGE', message: "the request's headers exceed 65536 bytes" } });
      const fits = await fetch(`${url}/annotators/a`, { headers: { ...(await bearer({ admin: true })), 'x-pad': 'p'.repeat(20_000) } });
      expect(fits.status).toBe(200);
    } finally {
      await server.close();
    }
  });

  it('answers bytes that are not HTTP with 400 and the usual error body', async () => {
    const { server, url } = await listening();
    try {
      for (const request of ['GARBAGE\r\n\r\n', 'GET /annotators/a HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n']) {
        const answer = await raw(url, request);
        expect(answer).toMatch(/^HTTP\/1\.1 400 /);
        expect(JSON.parse(answer.slice(answer.indexOf('\r\n\r\n') + 4))).toEqual({ error: { code: 'BAD_REQUEST', message: 'the request is not valid HTTP/1.1' } });
      }
    } finally {
      await server.close();
    }
  });

  it('answers a JSON body that stops arriving with 408 once its deadline passes, and closes the connection', async () => {
    const { server, url } = await listening({ bodyTimeoutMs: 200 });
    try {
      const started = Date.now();
      // Headers and one byte of a 1,000-byte body, then nothing: the socket must not stay open.
      const answer = await raw(url, `POST /echo HTTP/1.1\r\nHost: x\r\nAuthorization: ${(await bearer({ admin: true })).authorization}\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{`);
      expect(answer).toMatch(/^HTTP\/1\.1 408 /);
      expect(answer.toLowerCase()).toContain('connection: close');
      expect(JSON.parse(answer.slice(answer.indexOf('\r\n\r\n') + 4))).toEqual({ error: { code: 'REQUEST_TIMEOUT', message: 'the request body was not received within 200 ms' } });
      expect(Date.now() - started).toBeLessThan(5_000);
      // A body that arrives in time is read as before.
      const res = await fetch(`${url}/echo`, { method: 'POST', headers: { ...(await bearer({ admin: true })), 'content-type': 'application/json' }, body: '{"a":1}' });
      expect(await res.json()).toEqual({ a: 1 });
    } finally {
      await server.close();
    }
  });

  it('lets the body deadline pass harmlessly where fastify never reads the body: a GET with a JSON type, a body over the limit, a media type it refuses', async () => {
    const crashes: unknown[] = [];
    const crash = (error: unknown) => crashes.push(error);
    process.on('uncaughtException', crash);
    const { server, url } = await listening({ bodyTimeoutMs: 150, bodyLimit: 100 });
    const { hostname, port } = new URL(url);
    const token = (await bearer({ admin: true })).authorization;
    // Each sends its headers and then keeps its connection open without the body it announced.
    const openRequest = (request: string) =>
      new Promise<{ answer: () => string; socket: ReturnType<typeof connect> }>((resolve) => {
        let answer = '';
        const socket = connect(Number(port), hostname, () => {
          socket.write(request);
          resolve({ answer: () => answer, socket });
        });
        socket.on('data', (chunk) => (answer += chunk.toString()));
        socket.on('error', () => undefined);
      });
    try {
      const sockets = await Promise.all([
        openRequest(`GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 50\r\n\r\n`),
        openRequest(`POST /echo HTTP/1.1\r\nHost: x\r\nAuthorization: ${token}\r\nContent-Type: application/json\r\nContent-Length: 5000\r\n\r\n{"a":`),
        openRequest(`POST /echo HTTP/1.1\r\nHost: x\r\nAuthorization: ${token}\r\nContent-Type: application/json-patch+json\r\nContent-Length: 50\r\n\r\n[`),
      ]);
      await vi.waitFor(() => expect(sockets.map((s) => s.answer().slice(0, 12))).toEqual(['HTTP/1.1 200', 'HTTP/1.1 413', 'HTTP/1.1 415']), { timeout: 10_000, interval: 20 });
      // The server (in this process) set each body deadline before it answered. A timer set now
      // and due after them runs after them (Node runs timers in the order they fall due), so once
      // it has, every deadline has passed, with the sockets still open and their bodies unread.
      await new Promise((resolve) => setTimeout(resolve, 150 + 50));
      expect(crashes).toEqual([]);
      for (const { socket } of sockets) socket.destroy();
      expect((await fetch(`${url}/healthz`)).status).toBe(200);
    } finally {
      process.off('uncaughtException', crash);
      await server.close();
    }
  });

  it('closes the connection of a request answered before its JSON body arrived whole, and the server still closes at once', async () => {
    const { server, url } = await listening({ bodyTimeoutMs: 5_000 });
    const { hostname, port } = new URL(url);
    const token = (await bearer({ admin: true })).authorization;
    /** Sends headers announcing 50,000 bytes and only the first thousand, then nothing; what came back by the time the server closed the socket. */
    const answered = (head: string) =>
      new Promise<{ text: string; closed: boolean }>((resolve, reject) => {
        let text = '';
        const socket = connect(Number(port), hostname, () => socket.write(`${head}Content-Type: application/json\r\nContent-Length: 50000\r\n\r\n{"pad":"${'x'.repeat(1_000)}`));
        socket.on('data', (chunk) => (text += chunk.toString()));
        socket.on('close', () => resolve({ text, closed: true }));
        socket.on('error', reject);
        setTimeout(() => (socket.destroy(), resolve({ text, closed: false })), 3_000);
      });
    try {
      // No token: 401 at once. A method no route takes: 404. Either way the body is not read.
      for (const [head, status] of [
        ['POST /echo HTTP/1.1\r\nHost: x\r\n', 'HTTP/1.1 401'],
        [`PROPFIND /annotators/a HTTP/1.1\r\nHost: x\r\nAuthorization: ${token}\r\n`, 'HTTP/1.1 404'],
      ] as const) {
        const { text, closed } = await answered(head);
        expect(text.slice(0, 12), head).toBe(status);
        expect(text.toLowerCase()).toContain('connection: close');
        expect(closed, head).toBe(true);
      }
    } finally {
      const closing = server.close();
      expect(await Promise.race([closing.then(() => 'closed'), new Promise((resolve) => setTimeout(() => resolve('still open'), 2_000))])).toBe('closed');
    }
  });

  it('answers a JSON body whose bytes are not UTF-8 with 400 INVALID_JSON instead of storing replacement characters', async () => {
    const server = app();
    server.post('/echo', async (request) => request.body);
    const headers = { ...(await bearer({ admin: true })), 'content-type': 'application/json' };
    const bad = await server.inject({ method: 'POST', url: '/echo', headers, payload: Buffer.concat([Buffer.from('{"reason":"'), Buffer.from([0xff, 0xfe]), Buffer.from('"}')]) });
    expect(bad.statusCode).toBe(400);
    expect(bad.json()).toEqual({ error: { code: 'INVALID_JSON', message: 'request body is not valid UTF-8' } });
    // Real UTF-8, a BOM before it, and the prototype guard are as fastify's own parser has them.
    expect((await server.inject({ method: 'POST', url: '/echo', headers, payload: Buffer.from('\uFEFF{"reason":"été 🐱"}') })).json()).toEqual({ reason: 'été 🐱' });
    expect((await server.inject({ method: 'POST', url: '/echo', headers, payload: Buffer.from('\uFEFF\uFEFF{"a":1}') })).statusCode).toBe(400);
    expect((await server.inject({ method: 'POST', url: '/echo', headers, payload: '{"__proto__":{"admin":true}}' })).statusCode).toBe(400);
    expect((await server.inject({ method: 'POST', url: '/echo', headers, payload: '{"constructor":{"prototype":{"admin":true}}}' })).statusCode).toBe(400);
    expect((await server.inject({ method: 'POST', url: '/echo', headers, payload: '' })).json()).toMatchObject({ error: { code: 'INVALID_JSON' } });
  });

  it('refuses a JSON body holding a string longer than any field before parsing it, since long keys of one length make JSON.parse quadratic', async () => {
    const server = app();
    server.post('/echo', async (request) => request.body);
    const headers = { ...(await bearer({ admin: true })), 'content-type': 'application/json' };
    const keys = Array.from({ length: 40 }, (_, n) => `"${String(n).padStart(4, '0')}${'k'.repeat(20_000)}":1`).join(',');
    const bad = await server.inject({ method: 'POST', url: '/echo', headers, payload: `{${keys}}` });
    expect(bad.statusCode).toBe(400);
    expect(bad.json()).toEqual({ error: { code: 'VALIDATION_FAILED', message: 'request body holds a string over 16383 bytes, longer than any field takes' } });
    const long = { reason: 'r'.repeat(16_383) };
    expect((await server.inject({ method: 'POST', url: '/echo', headers, payload: JSON.stringify(long) })).json()).toEqual(long);
  });

  it('routes a path parameter as long as an actor name may be, percent-encoded', async () => {
    const { server, url } = await listening();
    try {
      const name = `${'é'.repeat(60)}${'a'.repeat(68)}`;
      const res = await fetch(`${url}/annotators/${encodeURIComponent(name)}`, { headers: await bearer({ admin: true }) });
      expect(res.status).toBe(200);
      expect(((await res.json()) as { annotatorId: string }).annotatorId).toBe(name);
    } finally {
      await server.close();
    }
  });
});
