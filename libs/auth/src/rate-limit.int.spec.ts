import { Redis } from 'ioredis';
import { afterAll, describe, expect, inject, it } from 'vitest';
import { createRateLimiter } from './rate-limit';

const infra = inject('infra');

describe('rate limits shared through Redis', () => {
  // Not @labelflow/testing: it depends on this library (test tokens), and libraries form no cycles.
  const namespace = `rl-test-${process.pid}-${Date.now()}`;
  const clients: Redis[] = [];
  // As the services configure it: commands fail at once instead of queueing while disconnected.
  const client = async () => {
    const redis = new Redis(infra.redisUrl, { maxRetriesPerRequest: 0, enableOfflineQueue: false, lazyConnect: true });
    clients.push(redis);
    await redis.connect();
    return redis;
  };
  afterAll(async () => {
    const [first] = clients;
    if (first) await first.del(`${namespace}:alice`, `${namespace}:bob`, `${namespace}:carol`);
    for (const c of clients) c.disconnect();
  });

  it('gives two instances one allowance per subject between them', async () => {
    const fallbacks: unknown[] = [];
    const settings = { namespace, perSecond: 0.5, burst: 4, onFallback: (e: unknown) => fallbacks.push(e) };
    const first = createRateLimiter({ ...settings, redis: await client() });
    const second = createRateLimiter({ ...settings, redis: await client() });
    const decisions = await Promise.all([first, second, first, second, first, second].map((l) => l.take('alice')));
    expect(fallbacks).toEqual([]);
    expect(decisions.filter((d) => d.ok)).toHaveLength(4);
    const refused = decisions.find((d) => !d.ok);
    // One token every 2 s: the next is at most 2 s away.
    expect(refused && !refused.ok && refused.retryAfterMs).toBeGreaterThan(0);
    expect(refused && !refused.ok && refused.retryAfterMs).toBeLessThanOrEqual(2_000);
    expect((await second.take('bob')).ok).toBe(true);
  });

  it('keeps its key only as long as the allowance needs it', async () => {
    const redis = await client();
    const limiter = createRateLimiter({ namespace, perSecond: 1, burst: 2, redis });
    await limiter.take('carol');
    const ttl = await redis.pttl(`${namespace}:carol`);
    expect(ttl).toBeGreaterThan(0);
    expect(ttl).toBeLessThanOrEqual(1_002);
  });

  it('limits each instance on its own while Redis does not answer', async () => {
    // A port nothing listens on: the client fails at once, as it does while Redis is down.
    const away = new Redis('redis://127.0.0.1:1', { maxRetriesPerRequest: 0, enableOfflineQueue: false, lazyConnect: true, retryStrategy: () => null });
    away.on('error', () => undefined);
    clients.push(away);
    const fallbacks: unknown[] = [];
    const limiter = createRateLimiter({ namespace, perSecond: 1, burst: 2, redis: away, onFallback: (e) => fallbacks.push(e) });
    const decisions = [await limiter.take('dave'), await limiter.take('dave'), await limiter.take('dave')];
    expect(decisions.map((d) => d.ok)).toEqual([true, true, false]);
    expect(fallbacks).toHaveLength(3);
  });
});
