import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { deleteRedisKeys, metricValue, produceRaw, queryRows, readAll, rewindGroup, serviceNames, startStack, type TestStack } from '@labelflow/testing';
import { expectAuditClean } from './audit';
import { expectExactlyOnce } from './effects';
import { approveAll, createProject, createTask, waitForStatus } from './saga';

describe('a duplicate storm', () => {
  let stack: TestStack;
  const infra = inject('infra');
  beforeAll(async () => {
    stack = await startStack(infra);
  });
  afterAll(async () => stack?.stop());

  it('applies every effect exactly once when every event is delivered again three ways, and the metrics name the tier that caught each', async () => {
    const price = 120;
    const budget = 5_000;
    const projectId = await createProject(stack, budget, price);
    const tasks = await Promise.all(Array.from({ length: 8 }, (_, i) => createTask(stack, projectId, `storm ${i}`)));
    await approveAll(stack, tasks, 3);
    for (const taskId of tasks) await waitForStatus(stack, taskId, 'completed');
    await stack.quiesce();

    // 1. Re-published raw: every message on every topic produced again, byte for byte.
    const topics = ['task-events', 'label-events', 'qa-events', 'billing-events'].map((t) => `${stack.prefix}.${t}`);
    for (const topic of topics) {
      const messages = await readAll(infra.kafkaBrokers, topic);
      await produceRaw(infra.kafkaBrokers, topic, messages.map((m) => ({ key: m.key?.toString() ?? null, value: m.value, headers: m.headers ?? {} })));
    }
    // 2. Re-sent by the outbox relays: every row listed as pending again.
    for (const name of serviceNames) await queryRows(stack.databases[name], 'INSERT INTO outbox_pending (id) SELECT id FROM outbox WHERE failed_at IS NULL ON CONFLICT DO NOTHING');
    await stack.quiesce();
    for (const name of ['task-svc', 'label-svc', 'qa-svc'] as const) {
      expect(metricValue(await stack.metrics(name), 'dedup_duplicates_total', { tier: 'redis' }), `${name} redis-tier duplicates`).toBeGreaterThan(0);
    }

    // 3. Replayed by rewinding every consumer group to the beginning. qa-svc and billing-svc also
    //    lose their Redis keys, so their replay can only be caught by the PostgreSQL inbox.
    for (const name of serviceNames) await stack.processes[name].stop();
    for (const name of serviceNames) await rewindGroup(infra.kafkaBrokers, stack.groupOf(name), stack.processes[name].consumes.map((k) => `${stack.prefix}.${k}-events`));
    for (const name of ['qa-svc', 'billing-svc'] as const) expect(await deleteRedisKeys(infra.redisUrl, `lf:dedup:${stack.prefix}:${name}:*`)).toBeGreaterThan(0);
    for (const name of serviceNames) await stack.start(name);
    await stack.quiesce();

    const consumedTwice = { 'task-svc': 'redis', 'label-svc': 'redis', 'qa-svc': 'postgres', 'billing-svc': 'postgres' } as const;
    for (const [name, tier] of Object.entries(consumedTwice) as [keyof typeof consumedTwice, string][]) {
      const metrics = await stack.metrics(name);
      expect(metricValue(metrics, 'dedup_duplicates_total', { tier }), `${name} duplicates caught by ${tier} after the replay`).toBeGreaterThan(0);
      expect(metricValue(metrics, 'consumer_messages_total', { outcome: 'applied' }), `${name} applied nothing new in the replay`).toBe(0);
    }
    await expectExactlyOnce(stack, projectId, tasks, price, budget);
    await expectAuditClean(stack, infra.kafkaBrokers);
  });
});
