import { afterEach, describe, expect, inject, it } from 'vitest';
import { z } from 'zod';
import { LabelSubmittedV1, TopicSchemas, versionedTopic, type LabelSubmitted } from '@labelflow/contracts';
import { createMetrics } from '@labelflow/telemetry';
import { captureLogs, eventually, produceRaw, readTopic, uniqueName } from '@labelflow/testing';
import { createConsumerLoop, createKafka, ensureTopics, type ConsumerLoop } from './index';

const infra = inject('infra');
const logger = captureLogs({ service: 'versions-test' }).logger;
const kafka = createKafka({ brokers: infra.kafkaBrokers.split(','), clientId: 'versions-test', logger });

/** The label topic as a consumer built before LabelSubmitted v2 read it: v1 is the newest it knows. */
const BeforeV2 = versionedTopic(z.discriminatedUnion('type', [LabelSubmittedV1]), { LabelSubmitted: 1 });

const taskId = '7391122347125620736';
const envelope = (attempt: number) => ({
  id: `73911223471298150${String(attempt).padStart(2, '0')}`,
  taskId,
  projectId: '22222222-2222-4222-8222-222222222222',
  attempt,
  occurredAt: '2025-01-01T12:00:00.000Z',
  producer: 'label-svc',
  type: 'LabelSubmitted',
});
const annotations = [{ label: 'cat' }];
const v1 = (attempt: number) => ({ ...envelope(attempt), version: 1, payload: { annotatorId: 'alice', annotations } });
const v2 = (attempt: number, durationMs: number) => ({ ...envelope(attempt), version: 2, payload: { annotatorId: 'alice', annotations, durationMs } });
const record = (event: { version: number }) => ({ key: taskId, value: JSON.stringify(event), headers: { 'event-type': 'LabelSubmitted', 'event-version': String(event.version) } });

describe('the consumer loop and event versions', () => {
  const loops: ConsumerLoop[] = [];
  afterEach(async () => {
    await Promise.all(loops.splice(0).map((l) => l.close()));
  });

  const setup = async () => {
    const topic = uniqueName('versions-topic');
    const dlq = `${topic}.dlq`;
    await ensureTopics(kafka, [topic, dlq], 1);
    return { topic, dlq, groupId: uniqueName('group') };
  };
  /** A consumer that reacts to LabelSubmitted, reading the topic with `schema`, and keeps what it applied. */
  const start = async <E extends { readonly type: string }>(t: { topic: string; dlq: string; groupId: string }, schema: z.ZodType<E>, applied: E[]) => {
    const loop = createConsumerLoop<E>({
      kafka,
      groupId: t.groupId,
      bindings: [{ topic: t.topic, schema }],
      deadLetterTopic: t.dlq,
      logger,
      metrics: createMetrics({ service: 'versions-test', defaults: false }),
      sessionTimeoutMs: 6_000,
      retry: { initialMs: 20, maxMs: 100, maxAttempts: 3 },
      processor: {
        handles: (type) => type === 'LabelSubmitted',
        async process(run) {
          applied.push(...run.map(({ event }) => event));
          return run.map(() => ({ status: 'applied' as const }));
        },
      },
    });
    loops.push(loop);
    await loop.start();
    return loop;
  };

  it('hands the processor v1 and v2 alike, both in the newest shape', async () => {
    const t = await setup();
    const applied: LabelSubmitted[] = [];
    await start(t, TopicSchemas.label, applied);
    await produceRaw(infra.kafkaBrokers, t.topic, [record(v1(1)), record(v2(2, 1_500))]);

    await eventually(() => expect(applied).toEqual([{ ...v1(1), version: 2, payload: { annotatorId: 'alice', annotations, durationMs: null } }, v2(2, 1_500)]));
  });

  it('dead-letters an event newer than it knows with the reason, goes on, and applies it once it is replayed after the upgrade', async () => {
    const t = await setup();
    const before: z.infer<typeof BeforeV2>[] = [];
    const old = await start(t, BeforeV2, before);
    // Its type is one the consumer reacts to, so skipping by header must not hide it: it is decoded and refused.
    await produceRaw(infra.kafkaBrokers, t.topic, [record(v1(1)), record(v2(2, 1_500)), record(v1(3))]);

    await eventually(() => expect(before.map((e) => e.attempt)).toEqual([1, 3]));
    const [dead] = await readTopic(infra.kafkaBrokers, t.dlq, (m) => m.length >= 1);
    const header = (name: string) => dead!.headers?.[name]?.toString();
    expect(header('dlq-error-code')).toBe('MESSAGING_VERSION_UNSUPPORTED');
    expect(header('dlq-error-message')).toBe('LabelSubmitted version 2 is newer than this consumer knows (up to version 1); replay it once the consumer is upgraded');
    expect([header('dlq-source-topic'), header('dlq-source-offset'), header('event-version')]).toEqual([t.topic, '1', '2']);
    expect(JSON.parse(dead!.value!.toString())).toEqual(v2(2, 1_500));

    // The upgrade: the same group, reading with contracts that know v2. Nothing is left on the topic
    // for it until the dead letter is replayed (as `npm run dlq -- replay` does: key, value, headers).
    await old.close();
    loops.splice(loops.indexOf(old), 1);
    const after: LabelSubmitted[] = [];
    await start(t, TopicSchemas.label, after);
    const original = Object.fromEntries(Object.entries(dead!.headers ?? {}).filter(([k]) => !k.startsWith('dlq-')).map(([k, v]) => [k, v!.toString()]));
    await produceRaw(infra.kafkaBrokers, t.topic, [{ key: dead!.key!.toString(), value: dead!.value, headers: { ...original, 'dlq-replayed-from': `${t.dlq}:0:${dead!.offset}` } }]);

    await eventually(() => expect(after).toEqual([v2(2, 1_500)]));
  });
});
