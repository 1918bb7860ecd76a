import { afterAll, afterEach, describe, expect, inject, it } from 'vitest';
import { z } from 'zod';
import { createMetrics } from '@labelflow/telemetry';
import { captureLogs, eventually, metricValue, produceRaw, produceWithJavaClient, readTopic, uniqueName } from '@labelflow/testing';
import { createConsumerLoop, createKafka, createOffsetsReader, createServedTopics, ensureTopics, type ConsumerLoop, type OffsetsSource } from './index';

const infra = inject('infra');
const logger = captureLogs({ service: 'consumer-test' }).logger;
const kafka = createKafka({ brokers: infra.kafkaBrokers.split(','), clientId: 'consumer-test', logger });
const Msg = z.object({ type: z.literal('Msg'), taskId: z.string(), n: z.number().int() });
type Msg = z.infer<typeof Msg>;

describe('the consumer loop', () => {
  const loops: ConsumerLoop[] = [];
  const reader = createOffsetsReader({ brokers: infra.kafkaBrokers.split(','), clientId: 'consumer-test-progress' });
  afterEach(async () => {
    await Promise.all(loops.splice(0).map((l) => l.close()));
  });
  afterAll(() => reader.close());

  const setup = async () => {
    const topic = uniqueName('consumer-topic');
    const dlq = `${topic}.dlq`;
    await ensureTopics(kafka, [topic, dlq], 1);
    return { topic, dlq, groupId: uniqueName('group') };
  };
  /** One partition, and a dead-letter topic that refuses records over 2 KiB. */
  const setupSmallDeadLetterTopic = async () => {
    const topic = uniqueName('consumer-topic');
    const dlq = `${topic}.dlq`;
    const admin = kafka.admin();
    await admin.connect();
    try {
      await createServedTopics(admin, [{ topic, numPartitions: 1 }, { topic: dlq, numPartitions: 1, configEntries: [{ name: 'max.message.bytes', value: '2048' }] }]);
    } finally {
      await admin.disconnect();
    }
    return { topic, dlq, groupId: uniqueName('group') };
  };
  /**
   * `check` runs for every message of a run and may throw; only when none threw does the run count
   * as committed and land in `applied`, as a processor's one transaction would.
   */
  const start = async (opts: {
    topic: string;
    dlq: string;
    groupId: string;
    check?: (m: Msg) => Promise<void>;
    applied?: number[];
    runs?: number[][];
    /** Every run handed to the processor, whether it then committed or threw. */
    attempts?: number[][];
    handles?: (type: string) => boolean;
    isRetriable?: (e: unknown) => boolean;
    progressEveryMs?: number;
    offsets?: OffsetsSource;
    /** The topic's type list (`TopicBinding.types`). */
    types?: readonly string[];
  }) => {
    const metrics = createMetrics({ service: 'consumer-test', defaults: false });
    const loop = createConsumerLoop<Msg>({
      kafka,
      groupId: opts.groupId,
      bindings: [{ topic: opts.topic, schema: Msg, ...(opts.types ? { types: opts.types } : {}) }],
      deadLetterTopic: opts.dlq,
      logger,
      metrics,
      sessionTimeoutMs: 6_000,
      retry: { initialMs: 20, maxMs: 100, maxAttempts: 3 },
      ...(opts.isRetriable ? { isRetriable: opts.isRetriable } : {}),
      ...(opts.progressEveryMs ? { progressEveryMs: opts.progressEveryMs } : {}),
      ...(opts.offsets ? { offsets: opts.offsets } : {}),
      processor: {
        handles: opts.handles ?? (() => true),
        async process(run) {
          opts.attempts?.push(run.map(({ event }) => event.n));
          for (const { event } of run) await opts.check?.(event);
          opts.runs?.push(run.map(({ event }) => event.n));
          opts.applied?.push(...run.map(({ event }) => event.n));
          return run.map(() => ({ status: 'applied' as const }));
        },
      },
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
      applied,
      check: async (m) => {
        if (m.n === 1 && failures < 4) {
          failures++;
          throw new Error('database down');
        }
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
    const applied: number[] = [];
    const first = await start({
      ...t,
      isRetriable: () => true,
      applied,
      check: async (m) => {
        seen.push(m.n);
        if (m.n === 1) throw new Error('still down');
      },
    });
    await send(t.topic, [0, 1]);
    // 0 commits on its own once the run [0, 1] has failed a few times and was split; 1 keeps failing.
    await eventually(() => expect(applied).toEqual([0]));
    const triesOfOne = seen.filter((n) => n === 1).length;
    await eventually(() => expect(seen.filter((n) => n === 1).length).toBeGreaterThan(triesOfOne + 1));
    await first.loop.close();
    loops.splice(loops.indexOf(first.loop), 1);
    expect(await committed(t.groupId, t.topic)).toBeLessThanOrEqual(1);

    const redelivered: number[] = [];
    await start({ ...t, applied: redelivered });
    await eventually(() => expect(redelivered).toContain(1));
    expect(redelivered).not.toContain(0);
  });

  it('dead-letters garbage and a message that keeps failing, with its coordinates, and goes on', async () => {
    const t = await setup();
    const applied: number[] = [];
    const { metrics } = await start({
      ...t,
      applied,
      check: async (m) => {
        if (m.n === 666) throw Object.assign(new Error('bug in handler'), { code: 'BUG' });
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
    await start({ ...t, applied });
    // kafkajs cannot send a null header value, Java clients can: produce as one would.
    await produceWithJavaClient(infra.kafkaBrokers, t.topic, [
      { key: 'k', value: JSON.stringify({ type: 'Msg', taskId: 'k', n: 1 }), headers: { 'x-optional': null, traceparent: null } },
    ]);
    await send(t.topic, [2]);
    await eventually(() => expect(applied).toEqual([1, 2]));
    await eventually(async () => expect(await committed(t.groupId, t.topic)).toBe(2));
  });

  it('dead-letters a message the dead-letter topic refuses as too large without its value, with its coordinates, and goes on', async () => {
    const t = await setupSmallDeadLetterTopic();
    const { topic, dlq } = t;
    const applied: number[] = [];
    await start({ ...t, applied });
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

  it('dead-letters a message whose headers alone the dead-letter topic refuses, with the dlq headers, its type, the letter it replays and a cut key, and goes on', async () => {
    const t = await setupSmallDeadLetterTopic();
    const { topic, dlq } = t;
    const applied: number[] = [];
    await start({ ...t, applied });
    const key = 'k'.repeat(1_500);
    await produceRaw(infra.kafkaBrokers, topic, [{ key, value: 'not json', headers: { 'event-type': 'Msg', 'dlq-replayed-from': `${dlq}:0:3`, padding: 'p'.repeat(4_000) } }]);
    await send(topic, [9]);

    await eventually(() => expect(applied).toEqual([9]));
    const [dead] = await readTopic(infra.kafkaBrokers, dlq, (m) => m.length >= 1);
    expect(dead!.value).toBeNull();
    expect(dead!.key?.toString()).toBe('k'.repeat(1_024));
    expect(Object.keys(dead!.headers ?? {}).filter((h) => !h.startsWith('dlq-'))).toEqual(['event-type']);
    expect(dead!.headers?.['dlq-headers-omitted']?.toString()).toBe('MESSAGE_TOO_LARGE');
    expect(dead!.headers?.['dlq-value-omitted']?.toString()).toBe('MESSAGE_TOO_LARGE');
    expect(dead!.headers?.['dlq-error-code']?.toString()).toBe('MESSAGING_DECODE_FAILED');
    // A replay that failed again still names the letter it replays: the dlq tool leaves that one out next time.
    expect(dead!.headers?.['dlq-replayed-from']?.toString()).toBe(`${dlq}:0:3`);
    expect([dead!.headers?.['dlq-source-topic']?.toString(), dead!.headers?.['dlq-source-offset']?.toString()]).toEqual([topic, '0']);
    await eventually(async () => expect(await committed(t.groupId, topic)).toBe(2));
  });

  it('isolates a poison message in the middle of a batch: its neighbours commit in order, it alone is dead-lettered', async () => {
    const t = await setup();
    const applied: number[] = [];
    const runs: number[][] = [];
    // Produced before the consumer joins, so they arrive as one fetched batch.
    await send(t.topic, [1, 2, 3, 4, 666, 5, 6, 7]);
    await start({
      ...t,
      applied,
      runs,
      check: async (m) => {
        if (m.n === 666) throw Object.assign(new Error('bug in handler'), { code: 'BUG' });
      },
    });
    await eventually(() => expect(applied).toEqual([1, 2, 3, 4, 5, 6, 7]));
    expect(runs.some((r) => r.length > 1)).toBe(true);
    const [dead] = await readTopic(infra.kafkaBrokers, t.dlq, (m) => m.length >= 1);
    expect(dead!.headers?.['dlq-source-offset']?.toString()).toBe('4');
    await eventually(async () => expect(await committed(t.groupId, t.topic)).toBe(8));
  });

  describe('with several partitions (group commit)', () => {
    const PARTITIONS = 4;
    const setupPartitioned = async () => {
      const topic = uniqueName('consumer-topic');
      const dlq = `${topic}.dlq`;
      await ensureTopics(kafka, [topic], PARTITIONS);
      await ensureTopics(kafka, [dlq], 1);
      return { topic, dlq, groupId: uniqueName('group') };
    };
    /** Message n lives in partition ⌊n / 10⌋, so a run shows which partitions it came from. */
    const sendTo = (topic: string, ns: number[]) =>
      produceRaw(infra.kafkaBrokers, topic, ns.map((n) => ({ key: `k${n}`, partition: Math.floor(n / 10), value: JSON.stringify({ type: 'Msg', taskId: `k${n}`, n }) })));
    const committedAll = async (groupId: string, topic: string) => {
      const admin = kafka.admin();
      await admin.connect();
      try {
        const [entry] = await admin.fetchOffsets({ groupId, topics: [topic] });
        return Object.fromEntries((entry?.partitions ?? []).map((p) => [p.partition, Number(p.offset)]));
      } finally {
        await admin.disconnect();
      }
    };
    const partitionsOf = (run: number[]) => new Set(run.map((n) => Math.floor(n / 10))).size;

    it('applies the batches of several partitions fetched together in one processor call, each message once, and commits every partition', async () => {
      const t = await setupPartitioned();
      const applied: number[] = [];
      const runs: number[][] = [];
      const all = [0, 1, 2, 10, 11, 12, 20, 21, 22, 30, 31, 32];
      // Produced before the consumer joins: its first fetch brings every partition's batch at once.
      await sendTo(t.topic, all);
      const { metrics } = await start({ ...t, applied, runs });

      await eventually(() => expect([...applied].sort((a, b) => a - b)).toEqual(all));
      expect(runs.length).toBeLessThan(PARTITIONS);
      expect(Math.max(...runs.map(partitionsOf))).toBeGreaterThan(1);
      // Order inside each partition is kept.
      for (const run of runs) for (let p = 0; p < PARTITIONS; p++) expect(run.filter((n) => Math.floor(n / 10) === p)).toEqual([...run.filter((n) => Math.floor(n / 10) === p)].sort((a, b) => a - b));
      expect(metricValue(await metrics.render(), 'consumer_grouped_runs_sum')).toBe(PARTITIONS);
      await eventually(async () => expect(await committedAll(t.groupId, t.topic)).toEqual({ 0: 3, 1: 3, 2: 3, 3: 3 }));
    });

    it('dead-letters a poison message of one partition alone when its batch was merged with others, and applies every other message once', async () => {
      const t = await setupPartitioned();
      const applied: number[] = [];
      const attempts: number[][] = [];
      const all = [0, 1, 2, 10, 11, 12, 20, 21, 22];
      await sendTo(t.topic, all);
      await start({
        ...t,
        applied,
        attempts,
        check: async (m) => {
          if (m.n === 11) throw Object.assign(new Error('bug in handler'), { code: 'BUG' });
        },
      });

      await eventually(() => expect([...applied].sort((a, b) => a - b)).toEqual(all.filter((n) => n !== 11)));
      // The poison message was first tried together with other partitions' messages.
      expect(attempts.find((run) => run.includes(11))!.length).toBeGreaterThan(3);
      const [dead] = await readTopic(infra.kafkaBrokers, t.dlq, (m) => m.length >= 1);
      expect([dead!.headers?.['dlq-source-partition']?.toString(), dead!.headers?.['dlq-source-offset']?.toString()]).toEqual(['1', '1']);
      await eventually(async () => expect(await committedAll(t.groupId, t.topic)).toEqual({ 0: 3, 1: 3, 2: 3, 3: -1 }));
    });
  });

  it('skips event types the service does not react to by their header, without decoding them, and commits past them', async () => {
    const t = await setup();
    const applied: number[] = [];
    const { metrics } = await start({ ...t, applied, handles: (type) => type === 'Msg' });
    await produceRaw(infra.kafkaBrokers, t.topic, [
      { key: 'k', value: 'not even json', headers: { 'event-type': 'SomethingElse' } },
      { key: 'k', value: JSON.stringify({ type: 'Msg', taskId: 'k', n: 1 }), headers: { 'event-type': 'Msg' } },
    ]);
    await eventually(() => expect(applied).toEqual([1]));
    await eventually(async () => expect(await committed(t.groupId, t.topic)).toBe(2));
    const rendered = await metrics.render();
    expect(rendered).toMatch(/consumer_skipped_total\{topic="[^"]+",type="SomethingElse",service="consumer-test"\} 1/);
    // Skipped, not read: garbage behind a header this service ignores is neither invalid nor dead-lettered.
    expect(rendered).not.toMatch(/consumer_dead_lettered_total\{/);
    expect(rendered).not.toMatch(/outcome="invalid"/);
  });

  it('with the topic\'s type list, trusts a type header to skip only a type the topic carries in a body that names none the service handles', async () => {
    const t = await setup();
    const applied: number[] = [];
    const { metrics } = await start({ ...t, applied, handles: (type) => type === 'Msg', types: ['Msg', 'Other'] });
    await produceRaw(infra.kafkaBrokers, t.topic, [
      // The header lies about an event the service reacts to: the body decides, and it is applied.
      { key: 'k', value: JSON.stringify({ type: 'Msg', taskId: 'k', n: 1 }), headers: { 'event-type': 'Other' } },
      // The same with the handled type spelled with a JSON escape, which no byte search finds.
      { key: 'k', value: '{"type":"\\u004dsg","taskId":"k","n":3}', headers: { 'event-type': 'Other' } },
      // A type the topic carries and the service ignores: skipped unread.
      { key: 'k', value: JSON.stringify({ type: 'Other', taskId: 'k' }), headers: { 'event-type': 'Other' } },
      // A header naming no type of the topic is not trusted: the body is read, and garbage is dead-lettered.
      { key: 'k', value: 'not even json', headers: { 'event-type': 'Nonsense' } },
      { key: 'k', value: JSON.stringify({ type: 'Msg', taskId: 'k', n: 2 }), headers: { 'event-type': 'Msg' } },
    ]);
    await eventually(() => expect(applied).toEqual([1, 3, 2]));
    await eventually(async () => expect(await committed(t.groupId, t.topic)).toBe(5));
    const rendered = await metrics.render();
    expect(metricValue(rendered, 'consumer_skipped_total', { type: 'Other' })).toBe(1);
    expect(rendered).not.toMatch(/consumer_skipped_total\{[^}]*type="Nonsense"/);
    expect(rendered).toMatch(/consumer_dead_lettered_total\{topic="[^"]+",code="MESSAGING_DECODE_FAILED",service="consumer-test"\} 1/);
    const [dead] = await readTopic(infra.kafkaBrokers, t.dlq, (m) => m.length >= 1);
    expect(dead!.headers?.['dlq-source-offset']?.toString()).toBe('3');
  });

  it('files the skips of a topic without a type list under at most 64 header values, the rest as other', async () => {
    const t = await setup();
    const applied: number[] = [];
    const { metrics } = await start({ ...t, applied, handles: (type) => type === 'Msg' });
    await produceRaw(infra.kafkaBrokers, t.topic, [
      ...Array.from({ length: 70 }, (_, i) => ({ key: 'k', value: '{}', headers: { 'event-type': `Random${i}` } })),
      { key: 'k', value: JSON.stringify({ type: 'Msg', taskId: 'k', n: 1 }), headers: { 'event-type': 'Msg' } },
    ]);
    await eventually(() => expect(applied).toEqual([1]));
    const rendered = await metrics.render();
    expect(rendered.match(/^consumer_skipped_total\{/gm)).toHaveLength(65);
    expect(metricValue(rendered, 'consumer_skipped_total', { type: 'Random63' })).toBe(1);
    expect(metricValue(rendered, 'consumer_skipped_total', { type: 'other' })).toBe(6);
  });

  it.each([
    ['its own kafkajs admin', () => undefined],
    ['an offsets reader', () => reader],
  ])('reports how far the group has caught up and its lag, reading offsets through %s: never past a message still unprocessed, and past it once committed', async (_name, source) => {
    const t = await setup();
    let release: () => void = () => undefined;
    const held = new Promise<void>((resolve) => (release = resolve));
    const applied: number[] = [];
    const offsets = source();
    const { loop, metrics } = await start({ ...t, applied, progressEveryMs: 100, ...(offsets ? { offsets } : {}), check: async (m) => (m.n === 2 ? held : undefined) });
    const probes = async () => metricValue(await metrics.render(), 'consumer_progress_probes_total', { result: 'ok' });
    const lag = async () => metricValue(await metrics.render(), 'consumer_lag_messages', { group: t.groupId, topic: t.topic, partition: '0' });
    try {
      await send(t.topic, [1]);
      const sentOne = Date.now();
      await eventually(() => expect(applied).toEqual([1]));
      // Caught up past 1 before 2 and 3 exist: otherwise every probe could postdate them, and
      // "undefined" would not tell a group held at 2 from one no probe has seen yet.
      await eventually(() => expect(loop.caughtUpTo() ?? 0).toBeGreaterThan(sentOne));
      await send(t.topic, [2, 3]);
      // Acknowledged by now: a probe taken from here on sees them below its high watermarks.
      const acknowledged = Date.now();
      // Five probes later, message 2 is still held: the group may not claim to be past its production.
      const probed = await probes();
      await eventually(async () => expect(await probes()).toBeGreaterThanOrEqual(probed + 5));
      expect(loop.caughtUpTo()).toBeDefined();
      expect(loop.caughtUpTo()!).toBeLessThan(acknowledged);
      // 1 committed, 2 held and 3 behind it: two messages behind once the commit of 1 is seen.
      await eventually(async () => expect(await lag()).toBe(2));
    } finally {
      release();
    }
    const afterSend = Date.now();
    await eventually(() => expect(loop.caughtUpTo()!).toBeGreaterThan(afterSend));
    expect(applied).toEqual([1, 2, 3]);
    await eventually(async () => expect(await lag()).toBe(0));
  });

  it('commits past a transactional producer\'s commit markers, so the group reaches the high watermark and is caught up', async () => {
    const t = await setup();
    // As a model worker writing in transactions (Kafka Streams exactly-once, say) does: each
    // commit leaves a control record kafkajs never hands to eachBatch.
    const producer = kafka.producer({ transactionalId: uniqueName('tx'), idempotent: true, maxInFlightRequests: 1 });
    await producer.connect();
    try {
      for (const ns of [[1, 2], [3]]) {
        const tx = await producer.transaction();
        await tx.send({ topic: t.topic, messages: ns.map((n) => ({ key: 'k', value: JSON.stringify({ type: 'Msg', taskId: 'k', n }) })) });
        await tx.commit();
      }
    } finally {
      await producer.disconnect();
    }
    const applied: number[] = [];
    const { loop } = await start({ ...t, applied, progressEveryMs: 100 });
    await eventually(() => expect(applied).toEqual([1, 2, 3]));
    // Offsets 0-1 and 3 hold the messages, 2 and 4 the markers: the high watermark is 5.
    await eventually(async () => expect(await committed(t.groupId, t.topic)).toBe(5));
    const produced = Date.now();
    await eventually(() => expect(loop.caughtUpTo() ?? 0).toBeGreaterThanOrEqual(produced));
    // A fetch of nothing but a marker (a transaction that wrote elsewhere, or was aborted) is committed past too.
    const aborting = kafka.producer({ transactionalId: uniqueName('tx'), idempotent: true, maxInFlightRequests: 1 });
    await aborting.connect();
    try {
      const tx = await aborting.transaction();
      await tx.send({ topic: t.topic, messages: [{ key: 'k', value: JSON.stringify({ type: 'Msg', taskId: 'k', n: 4 }) }] });
      await tx.abort();
    } finally {
      await aborting.disconnect();
    }
    await eventually(async () => expect(await committed(t.groupId, t.topic)).toBe(7));
    expect(applied).toEqual([1, 2, 3]);
  });

  it('counts a partition whose records were all deleted before the group ever committed there as caught up', async () => {
    const t = await setup();
    await send(t.topic, [1, 2, 3]);
    const admin = kafka.admin();
    await admin.connect();
    try {
      // kafkajs finds the partition leader only among topics whose metadata it has loaded.
      await admin.fetchTopicMetadata({ topics: [t.topic] });
      await admin.deleteTopicRecords({ topic: t.topic, partitions: [{ partition: 0, offset: '-1' }] });
    } finally {
      await admin.disconnect();
    }
    const applied: number[] = [];
    const { loop } = await start({ ...t, applied, progressEveryMs: 100 });
    const started = Date.now();
    // Nothing is left to fetch, so the group never commits there; the deadlines' clock must still run.
    await eventually(() => expect(loop.caughtUpTo() ?? 0).toBeGreaterThanOrEqual(started));
    expect(applied).toEqual([]);
  });
});

