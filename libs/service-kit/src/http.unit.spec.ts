import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { HttpError, ServiceKitError } from './errors';
import { createHttpApp, parseInput } from './http';
import { captureLogs } from '@labelflow/testing';

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

  it('prefixes detail paths with what was parsed', () => {
    const error = failure({ tags: [], owner: { email: 'a@b.co' } }, 'query');

    expect(error.details).toEqual([expect.objectContaining({ path: 'query.title' })]);
    expect(error.message).toContain('invalid query');
  });
});

describe('createHttpApp shutdown', () => {
  it('closes promptly while a request is still running: its answer closes the keep-alive connection', async () => {
    const app = createHttpApp({ logger: captureLogs({ service: 'test' }).logger, readiness: {} });
    let entered!: () => void;
    const inRoute = new Promise<void>((resolve) => (entered = resolve));
    let release!: () => void;
    const released = new Promise<void>((resolve) => (release = resolve));
    app.get('/held', async () => {
      entered();
      await released;
      return { ok: true };
    });
    app.addHook('preClose', async () => release());
    const url = await app.listen({ port: 0, host: '127.0.0.1' });
    const answer = fetch(`${url}/held`);
    await inRoute;
    const closed = app.close();
    const res = await answer;
    expect([res.status, res.headers.get('connection')]).toEqual([200, 'close']);
    await res.text();
    // Without the header the server would wait for this keep-alive connection (fastify: 72 s).
    await closed;
  });

  it('keeps connections alive while the server runs', async () => {
    const app = createHttpApp({ logger: captureLogs({ service: 'test' }).logger, readiness: {} });
    const res = await app.inject({ url: '/healthz' });
    expect(res.headers.connection).not.toBe('close');
    await app.close();
  });
});

describe('createHttpApp errors', () => {
  it('answers 503 with the error code and Retry-After when a dependency is unavailable, 500 otherwise', async () => {
    const app = createHttpApp({ logger: captureLogs({ service: 'test' }).logger, readiness: {} });
    app.get('/down', async () => {
      throw new ServiceKitError('ID_UNAVAILABLE', 'lease lost', { retriable: true });
    });
    app.get('/pg-down', async () => {
      throw Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:5432'), { code: 'ECONNREFUSED' });
    });
    app.get('/bug', async () => {
      throw new TypeError('undefined is not a function');
    });
    const down = await app.inject({ url: '/down' });
    expect([down.statusCode, down.headers['retry-after'], down.json().error.code]).toEqual([503, '1', 'ID_UNAVAILABLE']);
    const pg = await app.inject({ url: '/pg-down' });
    expect([pg.statusCode, pg.json().error.code]).toEqual([503, 'ECONNREFUSED']);
    const bug = await app.inject({ url: '/bug' });
    expect([bug.statusCode, bug.json().error.code]).toEqual([500, 'INTERNAL']);
    await app.close();
  });

  it('answers a malformed URL with the same JSON error shape as every other error', async () => {
    const app = createHttpApp({ logger: captureLogs({ service: 'test' }).logger, readiness: {} });
    app.get('/tasks/:id', async () => ({ ok: true }));
    const res = await app.inject({ url: '/tasks/%E0%A4%A' });
    expect([res.statusCode, res.json().error.code]).toEqual([400, 'BAD_REQUEST']);
    await app.close();
  });

  it('refuses malformed caller headers with 400 CALLER_INVALID before the route runs', async () => {
    const app = createHttpApp({ logger: captureLogs({ service: 'test' }).logger, readiness: {} });
    let ran = 0;
    app.post('/cancel', async () => ++ran);
    const long = await app.inject({ method: 'POST', url: '/cancel', headers: { 'x-labelflow-user': 'a'.repeat(129), 'x-labelflow-role': 'admin' } });
    const role = await app.inject({ method: 'POST', url: '/cancel', headers: { 'x-labelflow-role': 'root!' } });
    expect([long.statusCode, long.json().error.code, role.statusCode, role.json().error.code]).toEqual([400, 'CALLER_INVALID', 400, 'CALLER_INVALID']);
    expect(ran).toBe(0);
    const fine = await app.inject({ method: 'POST', url: '/cancel', headers: { 'x-labelflow-user': 'ops@example.com', 'x-labelflow-role': 'admin' } });
    expect([fine.statusCode, ran]).toEqual([200, 1]);
    await app.close();
  });
});
