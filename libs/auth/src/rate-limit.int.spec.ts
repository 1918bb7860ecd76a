import { createServer, connect, type Socket } from 'node:net';
import type { AddressInfo } from 'node:net';
import { Redis } from 'ioredis';
import { afterAll, describe, expect, inject, it, vi } from 'vitest';
import { createRateLimiter, SKIPPED } from './rate-limit';

/**
 * A TCP proxy in front of the test Redis that can stop passing requests on: a Redis that hangs
 * (a stalled host, a network partition) rather than refusing connections. Counts what the
 * clients sent while frozen.
 */
async function freezableProxy(target: string) {
  const { hostname, port } = new URL(target);
  const state = { frozen: false, sentWhileFrozen: 0 };
  const sockets: Socket[] = [];
  /** What was sent while frozen, delivered late on thaw: a stall delays bytes, it does not lose them. */
  const held: (() => void)[] = [];
  const server = createServer((client) => {
    const upstream = connect(Number(port || 6379), hostname);
    sockets.push(client, upstream);
    client.on('data', (chunk) => {
      if (!state.frozen) return void upstream.write(chunk);
      state.sentWhileFrozen += 1;
      held.push(() => upstream.write(chunk));
    });
    upstream.on('data', (chunk) => client.write(chunk));
    client.on('error', () => upstream.destroy());
    upstream.on('error', () => client.destroy());
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `redis://127.0.0.1:${(server.address() as AddressInfo).port}`,
    state,
    freeze: () => void (state.frozen = true),
    thaw: () => {
      state.frozen = false;
      for (const deliver of held.splice(0)) deliver();
    },
    close: async () => {
      for (const socket of sockets) socket.destroy();
      await new Promise((resolve) => server.close(resolve));
    },
  };
}

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
    // No deadline is under test here: a slow machine must not turn a Redis answer into a fallback.
    const settings = { namespace, perSecond: 0.5, burst: 4, timeoutMs: 5_000, onFallback: (e: unknown) => fallbacks.push(e) };
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

  it('skips a Redis that hangs after a few timeouts, instead of paying the timeout on every request, and goes back to it once it answers', async () => {
    const proxy = await freezableProxy(infra.redisUrl);
    const redis = new Redis(proxy.url, { maxRetriesPerRequest: 0, enableOfflineQueue: false, lazyConnect: true });
    redis.on('error', () => undefined);
    clients.push(redis);
    await redis.connect();
    const fallbacks: unknown[] = [];
    // The breaker's clock is the test's: it stays open until the test says openMs has passed,
    // however slowly the skipped calls run. The timeout is long enough for any real answer.
    let clock = Date.now();
    const limiter = createRateLimiter({ namespace, perSecond: 1_000, burst: 1_000, redis, timeoutMs: 1_000, breaker: { failureThreshold: 3, openMs: 300 }, nowMs: () => clock, onFallback: (e) => fallbacks.push(e) });
    expect((await limiter.take('erin')).ok).toBe(true);
    expect(fallbacks).toEqual([]);

    proxy.freeze();
    for (let i = 0; i < 3; i++) expect((await limiter.take('erin')).ok).toBe(true); // each waits out its timeout
    expect(proxy.state.sentWhileFrozen).toBe(3);
    for (let i = 0; i < 50; i++) expect((await limiter.take('erin')).ok).toBe(true);
    expect(proxy.state.sentWhileFrozen).toBe(3); // nothing more sent: decided locally, no timeout paid
    expect(fallbacks.filter((e) => e === SKIPPED)).toHaveLength(50);

    proxy.thaw();
    clock += 301;
    // openMs has passed: a trial call reaches Redis again (the three stalled calls were answered
    // late, and ignored), and decisions are shared through Redis again.
    await vi.waitFor(
      async () => {
        fallbacks.length = 0;
        await limiter.take('erin');
        expect(fallbacks).toEqual([]);
      },
      { timeout: 10_000, interval: 100 },
    );
    redis.disconnect();
    await proxy.close();
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
