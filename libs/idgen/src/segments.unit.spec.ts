import { describe, expect, it } from 'vitest';
import { createSegmentAllocator, formatTaskNumber, IdgenErrors, parseTaskNumber, type Queryable } from './index';

/** An in-memory stand-in for `idgen_segments` with a controllable round-trip latency. */
function fakePool(latencyMs = 5) {
  const table = new Map<string, bigint>();
  let roundTrips = 0;
  const pool: Queryable = {
    async query<R>(_text: string, values?: unknown[]) {
      roundTrips++;
      const [scope, size] = values as [string, number];
      await new Promise((r) => setTimeout(r, latencyMs));
      const next = (table.get(scope) ?? 1n) + BigInt(size);
      table.set(scope, next);
      return { rows: [{ next_value: next.toString() } as R], rowCount: 1 };
    },
  };
  return { pool, roundTrips: () => roundTrips };
}

describe('the segment allocator (in memory)', () => {
  it('serves a burst of concurrent calls on a cold scope with one fetch and no number twice', async () => {
    const fake = fakePool();
    const fetched: [number, number, boolean][] = [];
    const alloc = createSegmentAllocator({ pool: fake.pool, segmentSize: 1000, onSegmentFetched: (_s, from, to, p) => fetched.push([from, to, p]) });
    const got = await Promise.all(Array.from({ length: 500 }, () => alloc.next('p1')));
    expect(new Set(got).size).toBe(500);
    expect(got.sort((a, b) => a - b)).toEqual(Array.from({ length: 500 }, (_, i) => i + 1));
    expect(fetched).toEqual([[1, 1000, false]]);
  });

  it('fetches for a waiting caller itself when the background prefetch it waited on failed', async () => {
    const fake = fakePool(2);
    let failNext = false;
    const flaky: Queryable = {
      query: async (text, values) => {
        if (failNext) {
          failNext = false;
          await new Promise((r) => setTimeout(r, 5));
          throw new Error('connection reset during prefetch');
        }
        return fake.pool.query(text, values);
      },
    };
    const prefetchErrors: unknown[] = [];
    const alloc = createSegmentAllocator({ pool: flaky, segmentSize: 5, prefetchAt: 0.2, onPrefetchError: (_s, e) => prefetchErrors.push(e) });
    const first = await Promise.all([1, 2, 3].map(() => alloc.next('p')));
    failNext = true;
    // The 4th number starts a prefetch that fails; the 6th has to wait for it and must not inherit its error.
    const rest = await Promise.all([1, 2, 3].map(() => alloc.next('p')));
    expect([...first, ...rest].sort((a, b) => a - b)).toEqual([1, 2, 3, 4, 5, 6]);
    expect(prefetchErrors).toHaveLength(1);
  });

  it('prefetches the next segment in the background and never fetches it twice', async () => {
    const fake = fakePool(2);
    const fetched: [number, number, boolean][] = [];
    const alloc = createSegmentAllocator({ pool: fake.pool, segmentSize: 10, prefetchAt: 0.2, onSegmentFetched: (_s, from, to, p) => fetched.push([from, to, p]) });
    const got: number[] = [];
    for (let i = 0; i < 95; i++) {
      got.push(...(await Promise.all([alloc.next('p'), alloc.next('p'), alloc.next('p'), alloc.next('p'), alloc.next('p')])));
      await new Promise((r) => setTimeout(r, 1));
    }
    expect(new Set(got).size).toBe(got.length);
    expect(got).toEqual(Array.from({ length: 475 }, (_, i) => i + 1)); // within one process, in order
    expect(fetched.filter(([, , p]) => p).length).toBeGreaterThan(40);
    expect(fake.roundTrips()).toBeLessThanOrEqual(49); // 475 / 10, plus at most one prefetched ahead
  });

  it('forgets the least recently used scope beyond maxScopes and keeps handing out numbers never given before', async () => {
    const fake = fakePool(0);
    const alloc = createSegmentAllocator({ pool: fake.pool, segmentSize: 10, maxScopes: 2 });
    expect([await alloc.next('a'), await alloc.next('b'), await alloc.next('a')]).toEqual([1, 1, 2]);
    // `b` is the least recently used: `c` pushes it out, and its next number comes from a new segment.
    expect(await alloc.next('c')).toBe(1);
    expect(await alloc.next('a')).toBe(3);
    expect(await alloc.next('b')).toBe(11);
    expect(fake.roundTrips()).toBe(4);
  });

  it('keeps scopes independent', async () => {
    const alloc = createSegmentAllocator({ pool: fakePool(0).pool, segmentSize: 5 });
    expect([await alloc.next('a'), await alloc.next('b'), await alloc.next('a')]).toEqual([1, 1, 2]);
  });

  it('rejects bad options and scopes', async () => {
    const { pool } = fakePool(0);
    expect(() => createSegmentAllocator({ pool, segmentSize: 0 })).toThrow(expect.objectContaining({ code: IdgenErrors.CONFIG_INVALID }));
    expect(() => createSegmentAllocator({ pool, prefetchAt: 1.5 })).toThrow(expect.objectContaining({ code: IdgenErrors.CONFIG_INVALID }));
    await expect(createSegmentAllocator({ pool }).next('')).rejects.toMatchObject({ code: IdgenErrors.INVALID_ID });
  });
});

describe('task numbers', () => {
  it('formats a project key and a number as KEY-n and parses it back', () => {
    expect(formatTaskNumber('PRJ', 1042)).toBe('PRJ-1042');
    expect(formatTaskNumber('ML2', 1)).toBe('ML2-1');
    expect(parseTaskNumber('PRJ-1042')).toEqual({ projectKey: 'PRJ', n: 1042 });
  });

  it('rejects project keys that are not an upper-case letter followed by 1-9 letters or digits', () => {
    for (const key of ['', 'P', 'prj', 'Prj', '1PR', 'PR-J', 'ABCDEFGHIJK', 'PRJ ']) {
      expect(() => formatTaskNumber(key, 1), key).toThrow(expect.objectContaining({ code: IdgenErrors.INVALID_ID }));
    }
    expect(formatTaskNumber('ABCDEFGHIJ', 7)).toBe('ABCDEFGHIJ-7');
  });

  it('rejects numbers that are not positive safe integers, and malformed task numbers', () => {
    for (const n of [0, -1, 1.5, Number.NaN, 2 ** 53]) {
      expect(() => formatTaskNumber('PRJ', n), String(n)).toThrow(expect.objectContaining({ code: IdgenErrors.INVALID_ID }));
    }
    for (const s of ['PRJ-0', 'PRJ-01', 'prj-1', 'PRJ1', 'PRJ-']) expect(() => parseTaskNumber(s), s).toThrow(expect.objectContaining({ code: IdgenErrors.INVALID_ID }));
  });
});
