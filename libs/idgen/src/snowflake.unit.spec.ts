import { describe, expect, it } from 'vitest';
import { composeSnowflake, createSnowflake, IdgenError, IdgenErrors, MAX_SEQUENCE, parseSnowflake, SNOWFLAKE_EPOCH_MS, SnowflakeId } from './index';

/** A clock that only moves when told to (or when the generator sleeps). */
function fakeClock(start = Date.UTC(2026, 2, 1, 12)) {
  let now = start;
  const sleeps: number[] = [];
  return {
    clock: () => now,
    set: (ms: number) => {
      now = ms;
    },
    sleeps,
    sleep: async (ms: number) => {
      sleeps.push(ms);
      now += ms;
    },
  };
}

const big = (id: string) => BigInt(id);

describe('Snowflake ids', () => {
  it('are strictly increasing and unique across many calls with a real clock', async () => {
    const sf = createSnowflake({ workerId: 7 });
    let prev = 0n;
    const seen = new Set<string>();
    for (let i = 0; i < 20_000; i++) {
      const id = await sf.next();
      expect(big(id) > prev).toBe(true);
      prev = big(id);
      seen.add(id);
    }
    expect(seen.size).toBe(20_000);
  });

  it('are strictly increasing and unique when many calls are in flight at once', async () => {
    const t = fakeClock();
    let calls = 0;
    // Advance the clock every 1000 reads so several milliseconds and sequences are covered.
    const sf = createSnowflake({ workerId: 3, clock: () => (++calls % 1000 === 0 ? (t.set(t.clock() + 1), t.clock()) : t.clock()), sleep: t.sleep });
    const ids = await Promise.all(Array.from({ length: 10_000 }, () => sf.next()));
    expect(new Set(ids).size).toBe(ids.length);
    for (let i = 1; i < ids.length; i++) expect(big(ids[i]!) > big(ids[i - 1]!)).toBe(true);
  });

  it('waits for the next millisecond when 4096 ids were issued in the current one', async () => {
    const t = fakeClock();
    const start = t.clock();
    const sf = createSnowflake({ workerId: 1, clock: t.clock, sleep: t.sleep });
    const ids: string[] = [];
    for (let i = 0; i < MAX_SEQUENCE + 1 + 10; i++) ids.push(await sf.next());
    expect(t.sleeps).toEqual([1]); // exactly one wait, after sequence 4095
    expect(parseSnowflake(ids[MAX_SEQUENCE]!)).toEqual({ timestampMs: start, workerId: 1, sequence: MAX_SEQUENCE });
    expect(parseSnowflake(ids[MAX_SEQUENCE + 1]!)).toEqual({ timestampMs: start + 1, workerId: 1, sequence: 0 });
    expect(new Set(ids).size).toBe(ids.length);
    for (let i = 1; i < ids.length; i++) expect(big(ids[i]!) > big(ids[i - 1]!)).toBe(true);
  });

  it('waits out a clock step back of 1 ms, reports it, and issues no duplicate', async () => {
    const t = fakeClock();
    const reported: number[] = [];
    const sf = createSnowflake({ workerId: 2, clock: t.clock, sleep: t.sleep, onClockBackward: (ms) => reported.push(ms) });
    const before = [await sf.next(), await sf.next()];
    t.set(t.clock() - 1);
    const after = await sf.next();
    expect(reported).toEqual([1]);
    expect(t.sleeps).toEqual([1]);
    expect(before).not.toContain(after);
    expect(big(after) > big(before[1]!)).toBe(true);
  });

  it('throws CLOCK_MOVED_BACKWARDS (not retriable) when the clock steps back by 10 s, and reports it', async () => {
    const t = fakeClock();
    const reported: number[] = [];
    const sf = createSnowflake({ workerId: 2, clock: t.clock, sleep: t.sleep, onClockBackward: (ms) => reported.push(ms) });
    await sf.next();
    t.set(t.clock() - 10_000);
    const err = await sf.next().catch((e: unknown) => e);
    expect(err).toBeInstanceOf(IdgenError);
    expect(err).toMatchObject({ code: IdgenErrors.CLOCK_MOVED_BACKWARDS, retriable: false });
    expect(reported).toEqual([10_000]);
    expect(t.sleeps).toEqual([]);
  });

  it('starts after the high-water mark it inherited with the worker id, never inside that millisecond', async () => {
    const t = fakeClock();
    const previous = createSnowflake({ workerId: 9, clock: t.clock, sleep: t.sleep });
    const issued = [await previous.next(), await previous.next()];
    expect(previous.lastIssuedMs()).toBe(t.clock());

    // The next holder's clock reads the very millisecond the previous holder last used.
    const next = createSnowflake({ workerId: 9, clock: t.clock, sleep: t.sleep, issuedUpToMs: previous.lastIssuedMs() });
    const first = await next.next();
    expect(big(first) > big(issued[1]!)).toBe(true);
    expect(parseSnowflake(first).timestampMs).toBe(previous.lastIssuedMs() + 1);
  });

  it('counts a clock still behind the inherited high-water mark as a step back: waited out if small, refused if large', async () => {
    const t = fakeClock();
    const mark = t.clock() + 3;
    const small = createSnowflake({ workerId: 9, clock: t.clock, sleep: t.sleep, issuedUpToMs: mark });
    expect(parseSnowflake(await small.next()).timestampMs).toBeGreaterThan(mark);

    const far = createSnowflake({ workerId: 9, clock: t.clock, sleep: t.sleep, issuedUpToMs: t.clock() + 60_000 });
    await expect(far.next()).rejects.toMatchObject({ code: IdgenErrors.CLOCK_MOVED_BACKWARDS });
    expect(createSnowflake({ workerId: 9 }).lastIssuedMs()).toBe(0);
  });

  it('refuses to issue ids once its lease is no longer valid', async () => {
    let valid = true;
    const sf = createSnowflake({ workerId: 4, isValid: () => valid });
    await sf.next();
    valid = false;
    await expect(sf.next()).rejects.toMatchObject({ code: IdgenErrors.LEASE_LOST });
  });

  it('issues ids synchronously with tryNext, in one strictly increasing sequence with next', async () => {
    const t = fakeClock();
    const sf = createSnowflake({ workerId: 5, clock: t.clock, sleep: t.sleep });
    const ids = [sf.tryNext()!, await sf.next(), sf.tryNext()!];
    expect(ids.every((id) => typeof id === 'string')).toBe(true);
    for (let i = 1; i < ids.length; i++) expect(big(ids[i]!) > big(ids[i - 1]!)).toBe(true);
  });

  it('answers undefined from tryNext where next would wait or refuse: a full millisecond, a step back, a lost lease', async () => {
    const t = fakeClock();
    let valid = true;
    const sf = createSnowflake({ workerId: 6, clock: t.clock, sleep: t.sleep, isValid: () => valid });
    for (let i = 0; i <= MAX_SEQUENCE; i++) expect(sf.tryNext()).toBeDefined();
    expect(sf.tryNext()).toBeUndefined();
    expect(t.sleeps).toEqual([]);
    t.set(t.clock() + 1);
    const fresh = sf.tryNext();
    expect(parseSnowflake(fresh!).sequence).toBe(0);
    t.set(t.clock() - 1);
    expect(sf.tryNext()).toBeUndefined();
    t.set(t.clock() + 1);
    valid = false;
    expect(sf.tryNext()).toBeUndefined();
    await expect(sf.next()).rejects.toMatchObject({ code: IdgenErrors.LEASE_LOST });
  });

  it('parse round-trips the timestamp, worker id and sequence of a generated id', async () => {
    const t = fakeClock(Date.UTC(2027, 5, 15, 8, 30));
    const sf = createSnowflake({ workerId: 1023, clock: t.clock, sleep: t.sleep });
    await sf.next();
    const id = await sf.next();
    expect(parseSnowflake(id)).toEqual({ timestampMs: Date.UTC(2027, 5, 15, 8, 30), workerId: 1023, sequence: 1 });
    expect(composeSnowflake(parseSnowflake(id))).toBe(id);
    expect(SnowflakeId.parse(id)).toBe(id);
  });

  it('lays out 41 bits of time since 2025-01-01, 10 bits of worker id and 12 bits of sequence', () => {
    const id = composeSnowflake({ timestampMs: SNOWFLAKE_EPOCH_MS + 1, workerId: 1, sequence: 1 });
    expect(BigInt(id)).toBe((1n << 22n) | (1n << 12n) | 1n);
    const last = composeSnowflake({ timestampMs: SNOWFLAKE_EPOCH_MS + 2 ** 41 - 1, workerId: 1023, sequence: 4095 });
    expect(BigInt(last)).toBe((1n << 63n) - 1n);
  });

  it('rejects invalid id strings', () => {
    for (const bad of ['', '0', '-1', '01', '1.5', ' 1', '1e3', 'abc', '9223372036854775808', '18446744073709551615', '123456789012345678901']) {
      expect(SnowflakeId.safeParse(bad).success, bad).toBe(false);
      expect(() => parseSnowflake(bad), bad).toThrow(expect.objectContaining({ code: IdgenErrors.INVALID_ID }));
    }
    expect(SnowflakeId.safeParse('9223372036854775807').success).toBe(true);
  });

  it('rejects worker ids outside 0..1023', () => {
    for (const workerId of [-1, 1024, 1.5, Number.NaN]) {
      expect(() => createSnowflake({ workerId }), String(workerId)).toThrow(expect.objectContaining({ code: IdgenErrors.CONFIG_INVALID }));
    }
  });

  it('refuses a clock that reads before the 2025 epoch', async () => {
    const sf = createSnowflake({ workerId: 0, clock: () => SNOWFLAKE_EPOCH_MS - 1 });
    await expect(sf.next()).rejects.toMatchObject({ code: IdgenErrors.CLOCK_OUT_OF_RANGE });
  });
});
