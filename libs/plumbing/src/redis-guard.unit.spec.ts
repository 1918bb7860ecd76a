import { afterEach, describe, expect, it, vi } from 'vitest';
import { BreakerState } from './breaker';
import { createRedisGuard, type RedisGuardOptions } from './redis-guard';

/** A stand-in for a Redis call: fails while `down`, answers `value` otherwise. */
const fakeRedis = () => {
  const state = { down: true, calls: 0 };
  const call = <T>(value: T) => () => {
    state.calls++;
    return state.down ? Promise.reject(new Error('connect ECONNREFUSED')) : Promise.resolve(value);
  };
  return { state, call };
};

const recorded = (over: Partial<RedisGuardOptions> = {}) => {
  const events: string[] = [];
  let now = 0;
  const guard = createRedisGuard({
    breaker: { failureThreshold: 2, openMs: 100 },
    now: () => now,
    onTransition: (from, to) => events.push(`${from}->${to}`),
    onFailure: (op) => events.push(`failed:${op}`),
    onSkip: (op) => events.push(`skipped:${op}`),
    ...over,
  });
  return { guard, events, advance: (ms: number) => (now += ms) };
};

describe('Redis behind a breaker', () => {
  afterEach(() => vi.useRealTimers());

  it('answers the value of a call that succeeds', async () => {
    const redis = fakeRedis();
    redis.state.down = false;
    const { guard } = recorded();
    expect(await guard.call('get', redis.call('v'))).toEqual({ ok: true, value: 'v' });
  });

  it('never throws: a failed call is counted and answered as failed, so the caller takes its fallback', async () => {
    const redis = fakeRedis();
    const { guard, events } = recorded();
    expect(await guard.call('get', redis.call('v'))).toEqual({ ok: false, reason: 'failed' });
    expect(events).toEqual(['failed:get']);
    expect(guard.state()).toBe(BreakerState.closed);
  });

  it('opens after consecutive failures and then skips Redis without calling it', async () => {
    const redis = fakeRedis();
    const { guard, events } = recorded();
    await guard.call('get', redis.call('v'));
    await guard.call('get', redis.call('v'));
    expect(guard.state()).toBe(BreakerState.open);
    expect(await guard.call('get', redis.call('v'))).toEqual({ ok: false, reason: 'open' });
    expect(redis.state.calls).toBe(2);
    expect(events).toEqual(['failed:get', 'closed->open', 'failed:get', 'skipped:get']);
  });

  it('closes on the first call after the open period once Redis answers again', async () => {
    const redis = fakeRedis();
    const { guard, advance } = recorded();
    await guard.call('get', redis.call('v'));
    await guard.call('get', redis.call('v'));
    redis.state.down = false;
    advance(100);
    expect(await guard.call('get', redis.call('v'))).toEqual({ ok: true, value: 'v' });
    expect(guard.state()).toBe(BreakerState.closed);
  });

  it('probes in the background while open, so it closes without any caller once Redis is back', async () => {
    vi.useFakeTimers();
    const redis = fakeRedis();
    const ping = redis.call('PONG');
    const { guard, events } = recorded({ now: Date.now, probe: ping });
    await guard.call('get', redis.call('v'));
    await guard.call('get', redis.call('v'));
    // Still down at the first probe: it fails, reopens the breaker, and probes again later.
    await vi.advanceTimersByTimeAsync(100);
    expect(guard.state()).toBe(BreakerState.open);
    redis.state.down = false;
    await vi.advanceTimersByTimeAsync(100);
    expect(guard.state()).toBe(BreakerState.closed);
    expect(events.filter((e) => e.startsWith('failed:'))).toEqual(['failed:get', 'failed:get', 'failed:probe']);
    guard.close();
  });

  it('stops probing once closed by its owner', async () => {
    vi.useFakeTimers();
    const redis = fakeRedis();
    const { guard } = recorded({ now: Date.now, probe: redis.call('PONG') });
    await guard.call('get', redis.call('v'));
    await guard.call('get', redis.call('v'));
    guard.close();
    const before = redis.state.calls;
    await vi.advanceTimersByTimeAsync(1_000);
    expect(redis.state.calls).toBe(before);
  });
});
