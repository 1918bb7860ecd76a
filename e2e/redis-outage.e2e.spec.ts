import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { eventually, metricValue, produceRaw, readAll, serviceNames, startPrivateRedis, startStack, type PrivateServer, type TestStack } from '@labelflow/testing';
import { expectAuditClean } from './audit';
import { expectExactlyOnce } from './effects';
import { approveAll, createProject, createTask, waitForStatus } from './saga';

describe('Redis stopped in the middle of a run', () => {
  let stack: TestStack;
  let redis: PrivateServer;
  const infra = inject('infra');
  beforeAll(async () => {
    // A private Redis on a spare port: this test crashes it, nobody else must notice.
    redis = await startPrivateRedis();
    const fast = { DEDUP_BREAKER_OPEN_MS: '300', DEDUP_REDIS_TIMEOUT_MS: '100' };
    stack = await startStack({ ...infra, redisUrl: redis.url }, Object.fromEntries(serviceNames.map((n) => [n, fast])));
  });
  afterAll(async () => {
    await stack?.stop();
    await redis?.destroy();
  });

  it('loses nothing and applies nothing twice: /readyz says degraded, the breaker opens, the Bloom and inbox tiers take over, and it closes again', async () => {
    const price = 75;
    const budget = 5_000;
    const projectId = await createProject(stack, budget, price);
    const tasks = await Promise.all(Array.from({ length: 12 }, (_, i) => createTask(stack, projectId, `outage ${i}`)));
    const drive = (ids: readonly string[]) => approveAll(stack, ids, 3);
    await drive(tasks.slice(0, 4));
    for (const taskId of tasks.slice(0, 4)) await waitForStatus(stack, taskId, 'completed');

    await redis.stop({ crash: true });
    // Degraded, not out of service: a load balancer gating on /readyz keeps sending traffic.
    for (const name of serviceNames) {
      await eventually(async () => {
        const ready = await stack.http(name).get<{ status: string; checks: Record<string, string> }>('/readyz');
        expect([ready.status, ready.body.status, ready.body.checks.redis?.startsWith('down'), ready.body.checks.postgres], `${name} /readyz`).toEqual([200, 'degraded', true, 'ok']);
      });
    }
    await drive(tasks.slice(4, 8));
    for (const taskId of tasks.slice(4, 8)) await waitForStatus(stack, taskId, 'completed');
    // Duplicates while Redis is down: every QA and billing event delivered again.
    for (const topic of ['qa-events', 'billing-events'].map((t) => `${stack.prefix}.${t}`)) {
      const messages = await readAll(infra.kafkaBrokers, topic);
      await produceRaw(infra.kafkaBrokers, topic, messages.map((m) => ({ key: m.key?.toString() ?? null, value: m.value, headers: m.headers ?? {} })));
    }
    await stack.quiesce();
    const during = await stack.metrics('billing-svc');
    expect(metricValue(during, 'dedup_breaker_transitions_total', { to: 'open' })).toBeGreaterThan(0);
    expect(metricValue(during, 'dedup_duplicates_total', { tier: 'postgres' })).toBeGreaterThan(0);
    expect(metricValue(during, 'dedup_bloom_decisions_total', { decision: 'maybe_confirmed_duplicate' })).toBeGreaterThan(0);

    await redis.start();
    // Closing needs no traffic: each gate probes Redis in the background while its breaker is open.
    for (const name of ['qa-svc', 'billing-svc', 'task-svc'] as const) {
      await eventually(async () => {
        const after = await stack.metrics(name);
        expect(metricValue(after, 'dedup_breaker_transitions_total', { to: 'closed' }), `${name} breaker closed again`).toBeGreaterThan(0);
        expect(metricValue(after, 'dedup_breaker_open'), `${name} breaker state`).toBe(0);
      });
    }
    await drive(tasks.slice(8));
    for (const taskId of tasks.slice(8)) await waitForStatus(stack, taskId, 'completed');
    await stack.quiesce();
    await expectExactlyOnce(stack, projectId, tasks, price, budget);
    await expectAuditClean(stack, infra.kafkaBrokers);
  });
});
