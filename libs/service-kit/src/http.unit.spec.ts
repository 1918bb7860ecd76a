import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { createLogger } from '@labelflow/telemetry';
import { HttpError, ServiceKitError } from './errors';
import { createHttpApp, parseInput } from './http';

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

describe('createHttpApp errors', () => {
  it('answers 503 with the error code and Retry-After when a dependency is unavailable, 500 otherwise', async () => {
    const app = createHttpApp({ logger: createLogger({ service: 'test', level: 'silent' }), readiness: {} });
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
});
