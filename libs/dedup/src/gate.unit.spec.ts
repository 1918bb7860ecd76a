import { afterEach, describe, expect, it, vi } from 'vitest';
import type { Redis } from 'ioredis';
import { BreakerState } from '@labelflow/plumbing';
import { createDedupGate } from './gate';
import type { InboxReader } from './inbox';
import { captureLogs } from '@labelflow/testing';

/** Just enough of a Redis client for the gate: every call fails until `up` is set. */
const fakeRedis = () => {
  const state = { up: false };
  const answer = <T>(value: T) => (state.up ? Promise.resolve(value) : Promise.reject(new Error('connect ECONNREFUSED')));
  const redis = { script: () => answer('sha'), evalsha: () => answer([1]), ping: () => answer('PONG') } as unknown as Redis;
  return { redis, state };
};
const inbox: InboxReader = { db: { query: async () => ({ rows: [], rowCount: 0 }) }, recentKeys: async function* () { yield* []; } };

describe('the dedup gate breaker probe', () => {
  afterEach(() => vi.useRealTimers());

  it('keeps probing until Redis answers, even when its timer fires before the breaker clock says the open period is over', async () => {
    vi.useFakeTimers();
    const { redis, state } = fakeRedis();
    const clock = { skew: 1 };
    const gate = createDedupGate({
      redis,
      inbox,
      namespace: 'ns',
      doneTtlMs: 60_000,
      redisTimeoutMs: 50,
      breaker: { failureThreshold: 1, openMs: 100 },
      bloom: { capacity: 100, errorRate: 0.01 },
      warmWindowMs: 0,
      logger: captureLogs({ service: 'test' }).logger,
      // The moment the breaker opens is stamped 1 ms after the timer's base (as libuv's cached
      // loop time lags Date.now()), so the first probe fires before the open period is over.
      now: () => Date.now() + clock.skew,
    });
    await gate.check([{ taskId: '1', eventType: 'X', attempt: 1 }]);
    expect(gate.breakerState()).toBe(BreakerState.open);
    clock.skew = 0;
    state.up = true;
    await vi.advanceTimersByTimeAsync(1_000);
    expect(gate.breakerState()).toBe(BreakerState.closed);
    gate.close();
  });
});
