import { describe, expect, it } from 'vitest';
import { canonicalJson, checkIdempotencyKey, idempotencyProblem, idempotencyScope, IdempotencyErrors, parseSeen, doneValue, lockValue, requestFingerprint } from './index';

describe('Idempotency-Key validation', () => {
  it('accepts tokens of 1..255 characters from the charset', () => {
    for (const key of ['a', 'x'.repeat(255), '8e03978e-40d5-43e8-bc93-6894a57f9324', 'order:42/retry~1+x=y.z_w']) {
      expect(checkIdempotencyKey(key)).toEqual({ ok: true, key });
    }
  });
  it('accepts the draft structured-string form and strips its quotes', () => {
    expect(checkIdempotencyKey('"8e03978e-40d5"')).toEqual({ ok: true, key: '8e03978e-40d5' });
  });
  it('rejects empty, too long, spaces, control characters, other characters and repeated headers', () => {
    for (const key of ['', '""', 'x'.repeat(256), 'a b', 'a\tb', 'a\u0000b', 'é', 'a,b', 'a, b', 'a;b', '{x}']) {
      const check = checkIdempotencyKey(key);
      expect(check.ok, key).toBe(false);
      if (!check.ok) expect(check.code).toBe(IdempotencyErrors.KEY_INVALID);
    }
    expect(checkIdempotencyKey(['a', 'b']).ok).toBe(false);
  });
});

describe('canonical JSON and the request fingerprint', () => {
  it('sorts keys at every depth and keeps array order', () => {
    expect(canonicalJson({ b: 1, a: { d: [3, 1, { z: 1, y: 2 }], c: null } })).toBe('{"a":{"c":null,"d":[3,1,{"y":2,"z":1}]},"b":1}');
  });
  it('writes numbers as JSON numbers and drops undefined members', () => {
    expect(canonicalJson({ n: 1.0, m: 1e3, u: undefined, s: 'x' })).toBe('{"m":1000,"n":1,"s":"x"}');
    expect(canonicalJson([undefined, Number.NaN])).toBe('[null,null]');
  });
  const base = { method: 'POST', route: '/projects/:id/tasks', params: { id: 'p1' }, body: { title: 'cat', labels: ['a', 'b'], meta: { x: 1, y: 2 } } };
  it('is insensitive to key order and method case', () => {
    const reordered = { method: 'post', route: '/projects/:id/tasks', params: { id: 'p1' }, body: { meta: { y: 2, x: 1 }, labels: ['a', 'b'], title: 'cat' } };
    expect(requestFingerprint(reordered)).toBe(requestFingerprint(base));
    expect(requestFingerprint(base)).toMatch(/^[0-9a-f]{64}$/);
  });
  it('is sensitive to values, array order, route, params, query and method', () => {
    const fp = requestFingerprint(base);
    expect(requestFingerprint({ ...base, body: { ...base.body, title: 'dog' } })).not.toBe(fp);
    expect(requestFingerprint({ ...base, body: { ...base.body, labels: ['b', 'a'] } })).not.toBe(fp);
    expect(requestFingerprint({ ...base, body: { ...base.body, meta: { x: '1', y: 2 } } })).not.toBe(fp);
    expect(requestFingerprint({ ...base, route: '/projects/:id/batches' })).not.toBe(fp);
    expect(requestFingerprint({ ...base, params: { id: 'p2' } })).not.toBe(fp);
    expect(requestFingerprint({ ...base, query: { dryRun: 'true' } })).not.toBe(fp);
    expect(requestFingerprint({ ...base, method: 'PUT' })).not.toBe(fp);
  });
});

describe('scope composition', () => {
  it('joins the encoded caller and project, with - for no project', () => {
    expect(idempotencyScope('alice', 'p1')).toBe('alice:p1');
    expect(idempotencyScope('alice')).toBe('alice:-');
    expect(idempotencyScope('alice', null)).toBe('alice:-');
  });
  it('is unambiguous when parts contain the separator', () => {
    expect(idempotencyScope('a:b', 'c')).not.toBe(idempotencyScope('a', 'b:c'));
    expect(idempotencyScope('a:b', 'c')).toBe('a%3Ab:c');
  });
});

describe('problem details and the Redis values', () => {
  it('builds problem+json bodies with a stable code', () => {
    expect(idempotencyProblem(IdempotencyErrors.KEY_IN_FLIGHT, 'busy')).toEqual({
      type: 'urn:labelflow:problem:idempotency-key-in-flight',
      title: 'A request with this Idempotency-Key is being processed',
      status: 409,
      detail: 'busy',
      code: 'IDEMPOTENCY_KEY_IN_FLIGHT',
    });
    expect(idempotencyProblem(IdempotencyErrors.KEY_REUSED, 'x').status).toBe(422);
  });
  it('round-trips lock and done values', () => {
    const fp = 'f'.repeat(64);
    expect(parseSeen(lockValue(fp, 'owner-1'))).toEqual({ kind: 'locked', fingerprint: fp });
    expect(parseSeen(doneValue(fp, { status: 201, body: { id: 1 }, headers: { location: '/x' } }))).toEqual({
      kind: 'done',
      fingerprint: fp,
      response: { status: 201, body: { id: 1 }, headers: { location: '/x' } },
    });
    expect(parseSeen('garbage')).toBeUndefined();
  });
});
