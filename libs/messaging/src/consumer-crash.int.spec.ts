import { afterEach, describe, expect, inject, it } from 'vitest';
import { z } from 'zod';
import { createMetrics } from '@labelflow/telemetry';
import { captureLogs, eventually, holdConsumerGroup, metricValue, produceRaw, uniqueName, type HeldGroup } from '@labelflow/testing';
import { createConsumerLoop, createKafka, ensureTopics, type ConsumerLoop } from './index';

const infra = inject('infra');
const Msg = z.object({ type: z.literal('Msg'), taskId: z.string(), n: z.number().int() });
type Msg = z.infer<typeof Msg>;

/**
 * Crashes come from a real broker-side condition: another member holding the consumer group with a
 * partition assignor the loop does not offer (`holdConsumerGroup`). The broker then refuses the
 * loop's JoinGroup with INCONSISTENT_GROUP_PROTOCOL, which kafkajs neither retries nor restarts
 * from (`restart: false`).
 */
describe('the consumer loop after a crash kafkajs does not restart from', () => {
  const loops: ConsumerLoop[] = [];
  const held: HeldGroup[] = [];
  afterEach(async () => {
    await Promise.all(loops.splice(0).map((l) => l.close()));
    await Promise.all(held.splice(0).map((h) => h.release()));
  });

  const setup = async () => {
    const topic = uniqueName('crash-topic');
    const dlq = `${topic}.dlq`;
    const { logger, lines } = captureLogs({ service: 'consumer-crash-test' });
    const kafka = createKafka({ brokers: infra.kafkaBrokers.split(','), clientId: 'consumer-crash-test', logger });
    await ensureTopics(kafka, [topic, dlq], 1);
    return { topic, dlq, groupId: uniqueName('group'), logger, lines, kafka };
  };
  const create = (t: Awaited<ReturnType<typeof setup>>, applied: number[], check?: (m: Msg) => Promise<void>) => {
    const metrics = createMetrics({ service: 'consumer-crash-test', defaults: false });
    const loop = createConsumerLoop<Msg>({
      kafka: t.kafka,
      groupId: t.groupId,
      bindings: [{ topic: t.topic, schema: Msg }],
      deadLetterTopic: t.dlq,
      logger: t.logger,
      metrics,
      sessionTimeoutMs: 6_000,
      retry: { initialMs: 20, maxMs: 100, maxAttempts: 3 },
      restart: { initialMs: 50, maxMs: 400 },
      processor: {
        handles: () => true,
        async process(run) {
          for (const { event } of run) await check?.(event);
          applied.push(...run.map(({ event }) => event.n));
          return run.map(() => ({ status: 'applied' as const }));
        },
      },
    });
    loops.push(loop);
    return { loop, metrics };
  };
  const send = (topic: string, ns: number[]) => produceRaw(infra.kafkaBrokers, topic, ns.map((n) => ({ key: 'k', value: JSON.stringify({ type: 'Msg', taskId: 'k', n }) })));

  it('reports that it is not running, restarts itself with backoff, and consumes a message produced after the crash', async () => {
    const t = await setup();
    const foreign = await holdConsumerGroup(infra.kafkaBrokers, t.groupId);
    held.push(foreign);
    const applied: number[] = [];
    const { loop, metrics } = create(t, applied);

    expect(loop.health().state).toBe('stopped');
    await loop.start();
    const down = loop.health();
    expect(down.state).toBe('restarting');
    expect(down.reason).toMatch(/crashed.*incompatible with those of existing members/);
    // kafkajs gave up on it; the loop keeps trying, further apart each time.
    await eventually(() => expect(loop.health().crashes).toBeGreaterThanOrEqual(3));
    const rendered = await metrics.render();
    expect(metricValue(rendered, 'consumer_crashes_total', { restart: 'loop' })).toBeGreaterThanOrEqual(3);
    expect(metricValue(rendered, 'consumer_restarts_total')).toBeGreaterThanOrEqual(2);
    expect(metricValue(rendered, 'consumer_running')).toBe(0);
    const restarts = t.lines.filter((l) => l.msg === 'consumer crashed and kafkajs will not restart it; restarting it');
    expect(restarts.length).toBeGreaterThanOrEqual(3);
    const delays = restarts.map((l) => l['restartInMs'] as number);
    expect(delays[2]!).toBeGreaterThan(delays[0]!);

    await send(t.topic, [1]);
    await foreign.release();
    await eventually(() => expect(applied).toEqual([1]));
    expect(loop.health()).toMatchObject({ state: 'running' });
    expect(loop.health().reason).toBeUndefined();
    expect(metricValue(await metrics.render(), 'consumer_running')).toBe(1);
    expect(t.lines.some((l) => l.msg === 'consumer running again after a crash')).toBe(true);

    await loop.close();
    expect(loop.health().state).toBe('stopped');
  });

  it('restarts a consumer that crashed while running, and consumes what was produced after the crash', async () => {
    const t = await setup();
    const applied: number[] = [];
    let release!: () => void;
    const stuck = new Promise<void>((resolve) => (release = resolve));
    let entered!: () => void;
    const inProcessor = new Promise<void>((resolve) => (entered = resolve));
    const { loop } = create(t, applied, async (m) => {
      if (m.n !== 1) return;
      entered();
      await stuck;
    });
    await loop.start();
    expect(loop.health().state).toBe('running');
    try {
      await send(t.topic, [1]);
      await inProcessor;
      // Message 1 holds the loop past its session: the broker drops it from the group, the foreign
      // member takes the group over, and the loop's rejoin is refused once message 1 is done.
      held.push(await holdConsumerGroup(infra.kafkaBrokers, t.groupId, { timeoutMs: 30_000 }));
    } finally {
      release();
    }
    await eventually(() => expect(loop.health()).toMatchObject({ state: 'restarting', reason: expect.stringMatching(/incompatible with those of existing members/) }));
    await send(t.topic, [2]);
    await held.splice(0)[0]!.release();
    await eventually(() => expect(applied).toContain(2));
    expect(loop.health().state).toBe('running');
  });
});
