import { describe, expect, it } from 'vitest';
import { createRateLimiter } from './rate-limit';

describe('the local rate limiter', () => {
  it('lets a burst through, then one request per interval, per subject', async () => {
    let now = 1_000_000;
    const limiter = createRateLimiter({ namespace: 't', perSecond: 10, burst: 3, nowMs: () => now });
    const takes = async (subject: string, n: number) => Promise.all(Array.from({ length: n }, () => limiter.take(subject)));
    expect((await takes('a', 3)).every((d) => d.ok)).toBe(true);
    const refused = await limiter.take('a');
    expect(refused).toEqual({ ok: false, retryAfterMs: 100 });
    expect((await limiter.take('b')).ok).toBe(true);
    now += 100;
    expect((await limiter.take('a')).ok).toBe(true);
    expect((await limiter.take('a')).ok).toBe(false);
  });

  it('forgets the least recently seen subjects beyond its capacity', async () => {
    const now = 5_000_000;
    const limiter = createRateLimiter({ namespace: 't', perSecond: 1, burst: 1, localCapacity: 2, nowMs: () => now });
    expect((await limiter.take('a')).ok).toBe(true);
    expect((await limiter.take('b')).ok).toBe(true);
    expect((await limiter.take('c')).ok).toBe(true);
    // `a` was forgotten: a fresh allowance. `c` is remembered: refused.
    expect((await limiter.take('a')).ok).toBe(true);
    expect((await limiter.take('c')).ok).toBe(false);
  });

  it('refuses settings that allow nothing', () => {
    expect(() => createRateLimiter({ namespace: 't', perSecond: 0, burst: 1 })).toThrow(expect.objectContaining({ code: 'AUTH_CONFIG_INVALID' }));
  });
});
