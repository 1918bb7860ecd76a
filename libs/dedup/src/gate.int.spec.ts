import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { Redis } from 'ioredis';
import pg from 'pg';
import { createMetrics, type Metrics } from '@labelflow/telemetry';
import { captureLogs, createTestDatabase, eventually, startPrivateRedis, uniqueName, type PrivateServer, createTestPool } from '@labelflow/testing';
import { BreakerState, createDedupGate, inboxMigrationSql, inboxReader, recordInInbox, type DedupKey } from './index';

const infra = inject('infra');
const logger = captureLogs({ service: 'dedup-test' }).logger;

describe('the dedup gate on a real Redis that fails', () => {
  let redisServer: PrivateServer;
  let pool: pg.Pool;
  let dropDb: () => Promise<void>;
  const clients: Redis[] = [];

  beforeAll(async () => {
    redisServer = await startPrivateRedis();
    const db = await createTestDatabase(infra.pgUrl, uniqueName('gate'));
    dropDb = db.drop;
    pool = createTestPool(db.url);
    await pool.query(inboxMigrationSql);
  });
  afterAll(async () => {
    clients.forEach((c) => c.disconnect());
    await pool?.end();
    await dropDb?.();
    await redisServer?.destroy();
  });

  const connect = async () => {
    const redis = new Redis(redisServer.url, { lazyConnect: true, maxRetriesPerRequest: 0, enableOfflineQueue: false, retryStrategy: () => 50 });
    redis.on('error', () => undefined);
    clients.push(redis);
    await redis.connect();
    return redis;
  };
  const newGate = async (over: { capacity?: number; errorRate?: number; metrics?: Metrics } = {}) => {
    const redis = await connect();
    const gate = createDedupGate({
      redis,
      inbox: inboxReader(pool),
      namespace: uniqueName('ns'),
      doneTtlMs: 60_000,
      redisTimeoutMs: 5_000, // no test here is about a slow Redis: a loaded machine must not turn an answer into a fallback
      breaker: { failureThreshold: 2, openMs: 300 },
      bloom: { capacity: over.capacity ?? 10_000, errorRate: over.errorRate ?? 0.01 },
      warmWindowMs: 3600_000,
      logger,
      ...(over.metrics ? { metrics: over.metrics } : {}),
    });
    return { gate, redis };
  };
  const key = (attempt = 1): DedupKey => ({ taskId: crypto.randomUUID(), eventType: 'LabelSubmitted', attempt });
  const commit = async (k: DedupKey) => recordInInbox(pool, { ...k, eventId: crypto.randomUUID(), source: 'test' });

  it('checks a whole batch in one call and answers done only for what committed', async () => {
    const { gate } = await newGate();
    const keys = [key(), key(), key()];
    expect(await gate.check(keys)).toEqual([{ kind: 'proceed' }, { kind: 'proceed' }, { kind: 'proceed' }]);
    await gate.committed([keys[0]!]);
    expect(await gate.check(keys)).toEqual([{ kind: 'duplicate', tier: 'redis' }, { kind: 'proceed' }, { kind: 'proceed' }]);
  });

  it('lets a second instance proceed while the first still works on a key, and skips it once the first committed', async () => {
    const redis = await connect();
    const namespace = uniqueName('shared');
    const make = () =>
      createDedupGate({
        redis, inbox: inboxReader(pool), namespace, doneTtlMs: 60_000, redisTimeoutMs: 5_000,
        breaker: { failureThreshold: 2, openMs: 300 }, bloom: { capacity: 1_000, errorRate: 0.01 }, warmWindowMs: 0, logger,
      });
    const [a, b] = [make(), make()];
    const k = key();
    expect(await a.check([k])).toEqual([{ kind: 'proceed' }]);
    // Only the inbox row inside a transaction can arbitrate two live workers: Redis never guesses.
    expect(await b.check([k])).toEqual([{ kind: 'proceed' }]);
    await a.committed([k]);
    expect(await b.check([k])).toEqual([{ kind: 'duplicate', tier: 'redis' }]);
  });

  it('does not skip a money-moving event on a done marker planted in Redis: the inbox must hold the key', async () => {
    const redis = await connect();
    const namespace = uniqueName('planted');
    const metrics = createMetrics({ service: 'dedup-test', defaults: false });
    const gate = createDedupGate({
      redis, inbox: inboxReader(pool), namespace, doneTtlMs: 60_000, redisTimeoutMs: 5_000,
      breaker: { failureThreshold: 2, openMs: 300 }, bloom: { capacity: 1_000, errorRate: 0.01 }, warmWindowMs: 0, logger, metrics,
      confirmDone: (k) => k.eventType === 'BillingRefunded',
    });
    const [planted, trusted, real] = [{ ...key(), eventType: 'BillingRefunded' }, key(), { ...key(), eventType: 'BillingRefunded' }];
    await commit(real);
    // Someone with write access to Redis marks keys done that never committed (and one that did).
    await redis.set(`${namespace}:${planted.taskId}:BillingRefunded:1`, 'done');
    await redis.set(`${namespace}:${trusted.taskId}:LabelSubmitted:1`, 'done');
    await gate.committed([real]);
    expect(await gate.check([planted, trusted, real])).toEqual([{ kind: 'proceed' }, { kind: 'duplicate', tier: 'redis' }, { kind: 'duplicate', tier: 'redis' }]);
    expect(await metrics.render()).toMatch(/dedup_redis_unconfirmed_total\{service="dedup-test"\} 1/);
  });

  it('reloads its Lua script after Redis forgets it (NOSCRIPT) and keeps answering', async () => {
    const metrics = createMetrics({ service: 'dedup-test', defaults: false });
    const { gate, redis } = await newGate({ metrics });
    await gate.check([key()]);
    await redis.script('FLUSH');
    expect(await gate.check([key()])).toEqual([{ kind: 'proceed' }]);
    expect(await metrics.render()).toMatch(/dedup_script_loads_total\{script="check",service="dedup-test"\} 2/);
  });

  it('opens the breaker when Redis stops, falls back to Bloom + inbox without dropping new events, and closes when Redis is back', async () => {
    const metrics = createMetrics({ service: 'dedup-test', defaults: false });
    const { gate } = await newGate({ metrics });
    const seen = key();
    expect(await gate.check([seen])).toEqual([{ kind: 'proceed' }]);
    await commit(seen);
    await gate.committed([seen]);

    await redisServer.stop({ crash: true });
    const fresh = [key(), key(), key()];
    // The first failures open the breaker; from then on the Bloom filter and the inbox answer.
    await gate.check([key()]);
    await gate.check([key()]);
    expect(gate.breakerState()).toBe(BreakerState.open);
    expect(await gate.check([seen, ...fresh])).toEqual([{ kind: 'duplicate', tier: 'postgres' }, { kind: 'proceed' }, { kind: 'proceed' }, { kind: 'proceed' }]);

    await redisServer.start();
    // No traffic: the background probe alone must notice that Redis is back.
    await eventually(() => expect(gate.breakerState()).toBe(BreakerState.closed), { timeoutMs: 15_000, intervalMs: 100 });
    gate.close();
    const rendered = await metrics.render();
    expect(rendered).toMatch(/dedup_breaker_transitions_total\{to="open",service="dedup-test"\} [1-9]/);
    expect(rendered).toMatch(/dedup_breaker_transitions_total\{to="closed",service="dedup-test"\} [1-9]/);
    expect(rendered).toMatch(/dedup_bloom_decisions_total\{decision="maybe_confirmed_duplicate",service="dedup-test"\} 1/);
  });

  it('opens the breaker on consecutive failures even when empty calls come between them, as after every batch', async () => {
    const { gate } = await newGate();
    await redisServer.stop({ crash: true });
    try {
      await gate.check([key()]);
      await gate.committed([]);
      await gate.check([key()]);
      expect(gate.breakerState()).toBe(BreakerState.open);
    } finally {
      await redisServer.start();
      gate.close();
    }
  });

  it('never drops a new event on a tiny Bloom filter that answers maybe for almost everything', async () => {
    const metrics = createMetrics({ service: 'dedup-test', defaults: false });
    const { gate } = await newGate({ capacity: 10, errorRate: 0.5, metrics });
    const committed = Array.from({ length: 200 }, () => key());
    for (const k of committed) await commit(k);
    await gate.committed(committed);
    await redisServer.stop({ crash: true });
    try {
      await gate.check([key()]);
      await gate.check([key()]);
      expect(gate.breakerState()).toBe(BreakerState.open);
      const fresh = Array.from({ length: 300 }, () => key());
      const verdicts = await gate.check([...fresh, ...committed.slice(-10)]);
      expect(verdicts.slice(0, 300).every((v) => v.kind === 'proceed')).toBe(true);
      expect(verdicts.slice(300).every((v) => v.kind === 'duplicate')).toBe(true);
      gate.close();
      const falsePositives = Number((await metrics.render()).match(/dedup_bloom_decisions_total\{decision="maybe_false_positive",service="dedup-test"\} (\d+)/)?.[1] ?? 0);
      expect(falsePositives).toBeGreaterThan(30);
    } finally {
      await redisServer.start();
    }
  });
});
