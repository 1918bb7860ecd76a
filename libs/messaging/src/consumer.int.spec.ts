import { afterEach, describe, expect, inject, it } from 'vitest';
import { z } from 'zod';
import { createLogger, createMetrics } from '@labelflow/telemetry';
import { eventually, produceRaw, produceWithJavaClient, readTopic, uniqueName } from '@labelflow/testing';
import { createConsumerLoop, createKafka, ensureTopics, type ConsumerLoop, type HandleOutcome } from './index';

const infra = inject('infra');
const logger = createLogger({ service: 'consumer-test', level: 'silent' });
const kafka = createKafka({ brokers: infra.kafkaBrokers.split(','), clientId: 'consumer-test', logger });
const Msg = z.object({ type: z.literal('Msg'), taskId: z.string(), n: z.number().int() });
type Msg = z.infer<typeof Msg>;

describe('the consumer loop', () => {
  const loops: ConsumerLoop[] = [];
  afterEach(async () => {
    await Promise.all(loops.splice(0).map((l) => l.close()));
  });

  const setup = async () => {
    const topic = uniqueName('consumer-topic');
    const dlq = `${topic}.dlq`;
    await ensureTopics(kafka, [topic, dlq], 1);
    return { topic, dlq, groupId: uniqueName('group') };
  };
  const start = async (opts: { topic: string; dlq: string; groupId: string; handle: (m: Msg) => Promise<HandleOutcome>; isRetriable?: (e: unknown) => boolean }) => {
    const metrics = createMetrics({ service: 'consumer-test', defaults: false });
    const loop = createConsumerLoop<Msg>({
      kafka,
      groupId: opts.groupId,
      bindings: [{ topic: opts.topic, schema: Msg }],
      deadLetterTopic: opts.dlq,
      logger,
      metrics,
      sessionTimeoutMs: 6_000,
      retry: { initialMs: 20, maxMs: 100, maxAttempts: 3 },
      ...(opts.isRetriable ? { isRetriable: opts.isRetriable } : {}),
      handle: opts.handle,
    });
    loops.push(loop);
    await loop.start();
    return { loop, metrics };
  };
  const send = (topic: string, ns: number[]) => produceRaw(infra.kafkaBrokers, topic, ns.map((n) => ({ key: 'k', value: JSON.stringify({ type: 'Msg', taskId: 'k', n }) })));
  const committed = async (groupId: string, topic: string) => {
    const admin = kafka.admin();
    await admin.connect();
    try {
      const [entry] = await admin.fetchOffsets({ groupId, topics: [topic] });
      return Number(entry?.partitions[0]?.offset ?? -1);
    } finally {
      await admin.disconnect();
    }
  };

  it('holds the partition and retries a transient failure until the effect succeeds, in order', async () => {
    const t = await setup();
    const applied: number[] = [];
    let failures = 0;
    await start({
      ...t,
      isRetriable: () => true,
      handle: async (m) => {
        if (m.n === 1 && failures < 4) {
          failures++;
          throw new Error('database down');
        }
        applied.push(m.n);
        return { status: 'applied' };
      },
    });
    await send(t.topic, [0, 1, 2]);
    await eventually(() => expect(applied).toEqual([0, 1, 2]));
    expect(failures).toBe(4);
    await eventually(async () => expect(await committed(t.groupId, t.topic)).toBe(3));
  });

  it('never commits the offset of a message whose effect did not commit', async () => {
    const t = await setup();
    const seen: number[] = [];
    const first = await start({
      ...t,
      isRetriable: () => true,
      handle: async (m) => {
        seen.push(m.n);
        if (m.n === 1) throw new Error('still down');
        return { status: 'applied' };
      },
    });
    await send(t.topic, [0, 1]);
    await eventually(() => expect(seen.filter((n) => n === 1).length).toBeGreaterThan(2));
    await first.loop.close();
    loops.splice(loops.indexOf(first.loop), 1);
    expect(await committed(t.groupId, t.topic)).toBeLessThanOrEqual(1);

    const redelivered: number[] = [];
    await start({ ...t, handle: async (m) => (redelivered.push(m.n), { status: 'applied' }) });
    await eventually(() => expect(redelivered).toContain(1));
    expect(redelivered).not.toContain(0);
  });

  it('dead-letters garbage and a message that keeps failing, with its coordinates, and goes on', async () => {
    const t = await setup();
    const applied: number[] = [];
    const { metrics } = await start({
      ...t,
      handle: async (m) => {
        if (m.n === 666) throw Object.assign(new Error('bug in handler'), { code: 'BUG' });
        applied.push(m.n);
        return { status: 'applied' };
      },
    });
    await produceRaw(infra.kafkaBrokers, t.topic, [
      { key: 'k', value: 'not json at all' },
      { key: 'k', value: JSON.stringify({ type: 'Msg', taskId: 'k', n: 666 }) },
      { key: 'k', value: JSON.stringify({ type: 'Msg', taskId: 'k', n: 7 }) },
    ]);
    await eventually(() => expect(applied).toEqual([7]));
    const dead = await readTopic(infra.kafkaBrokers, t.dlq, (m) => m.length >= 2);
    expect(dead.map((m) => m.headers?.['dlq-error-code']?.toString())).toEqual(['MESSAGING_DECODE_FAILED', 'BUG']);
    expect(dead[0]!.value?.toString()).toBe('not json at all');
    expect(dead.map((m) => m.headers?.['dlq-source-offset']?.toString())).toEqual(['0', '1']);
    expect(dead[1]!.headers?.['dlq-error-message']?.toString()).toMatch(/failed 3 times: bug in handler/);
    expect(await metrics.render()).toMatch(/consumer_dead_lettered_total\{topic="[^"]+",code="BUG",service="consumer-test"\} 1/);
  });

  it('reads a message whose header carries a null value instead of crash-looping on it, and goes on', async () => {
    const t = await setup();
    const applied: number[] = [];
    await start({ ...t, handle: async (m) => (applied.push(m.n), { status: 'applied' }) });
    // kafkajs cannot send a null header value, Java clients can: produce as one would.
    await produceWithJavaClient(infra.kafkaBrokers, t.topic, [
      { key: 'k', value: JSON.stringify({ type: 'Msg', taskId: 'k', n: 1 }), headers: { 'x-optional': null, traceparent: null } },
    ]);
    await send(t.topic, [2]);
    await eventually(() => expect(applied).toEqual([1, 2]));
    await eventually(async () => expect(await committed(t.groupId, t.topic)).toBe(2));
  });

  it('dead-letters a message the dead-letter topic refuses as too large without its value, with its coordinates, and goes on', async () => {
    const topic = uniqueName('consumer-topic');
    const dlq = `${topic}.dlq`;
    const admin = kafka.admin();
    await admin.connect();
    try {
      await admin.createTopics({
        waitForLeaders: true,
        topics: [{ topic, numPartitions: 1 }, { topic: dlq, numPartitions: 1, configEntries: [{ name: 'max.message.bytes', value: '2048' }] }],
      });
    } finally {
      await admin.disconnect();
    }
    const t = { topic, dlq, groupId: uniqueName('group') };
    const applied: number[] = [];
    await start({ ...t, handle: async (m) => (applied.push(m.n), { status: 'applied' }) });
    const huge = `not json ${'x'.repeat(8_000)}`;
    await produceRaw(infra.kafkaBrokers, topic, [{ key: 'k', value: huge }]);
    await send(topic, [9]);

    await eventually(() => expect(applied).toEqual([9]));
    const [dead] = await readTopic(infra.kafkaBrokers, dlq, (m) => m.length >= 1);
    expect(dead!.value).toBeNull();
    expect(dead!.headers?.['dlq-value-omitted']?.toString()).toBe('MESSAGE_TOO_LARGE');
    expect(dead!.headers?.['dlq-error-code']?.toString()).toBe('MESSAGING_DECODE_FAILED');
    expect([dead!.headers?.['dlq-source-topic']?.toString(), dead!.headers?.['dlq-source-offset']?.toString()]).toEqual([topic, '0']);
    await eventually(async () => expect(await committed(t.groupId, topic)).toBe(2));
  });
});
