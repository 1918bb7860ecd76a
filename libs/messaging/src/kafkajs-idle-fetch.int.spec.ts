import { createRequire } from 'node:module';
import { afterAll, afterEach, beforeAll, describe, expect, inject, it } from 'vitest';
import { z } from 'zod';
import { captureLogs, eventually, produceRaw, uniqueName } from '@labelflow/testing';
import { createConsumerLoop, createKafka, ensureTopics, type ConsumerLoop } from './index';

const infra = inject('infra');
const logger = captureLogs({ service: 'idle-fetch-test', level: 'error' }).logger;
const kafka = createKafka({ brokers: infra.kafkaBrokers.split(','), clientId: 'idle-fetch-test', logger });
const Msg = z.object({ type: z.literal('Msg'), taskId: z.string(), n: z.number().int() });
type Msg = z.infer<typeof Msg>;

/** A fetch request the consumer sent: when, and how long the broker took to answer it. */
interface Fetch {
  readonly sentAt: number;
  readonly duration: number;
}

const IDLE_WAIT_MS = 1_000;
const AFTER_EMPTY = 3;

/** What a fetch asked the broker for, read off kafkajs's ConsumerGroup as its fetch begins. */
interface Asked {
  readonly groupId: string;
  readonly at: number;
  readonly minBytes: number;
  readonly maxWaitTime: number;
}
interface GroupFields {
  readonly groupId: string;
  readonly minBytes: number;
  readonly maxWaitTime: number;
}
type ConsumerGroupClass = { prototype: { fetch(this: GroupFields, nodeId: number): Promise<unknown> } };

describe('the idle long poll of a batching consumer', () => {
  const loops: ConsumerLoop[] = [];
  // The settings each fetch asked for, not how long the broker took: a JVM broker on a loaded
  // machine may answer a 50 ms fetch late, which says nothing of what the consumer asked.
  const asked: Asked[] = [];
  const ConsumerGroup = createRequire(import.meta.url)('kafkajs/src/consumer/consumerGroup.js') as ConsumerGroupClass;
  const unwrapped = ConsumerGroup.prototype.fetch;
  beforeAll(() => {
    ConsumerGroup.prototype.fetch = function fetch(this: GroupFields, nodeId: number) {
      asked.push({ groupId: this.groupId, at: Date.now(), minBytes: this.minBytes, maxWaitTime: this.maxWaitTime });
      return unwrapped.call(this, nodeId);
    };
  });
  afterAll(() => {
    ConsumerGroup.prototype.fetch = unwrapped;
  });
  const settings = (f: Asked) => ({ minBytes: f.minBytes, maxWaitTime: f.maxWaitTime });
  const LONG_POLL = { minBytes: 1, maxWaitTime: IDLE_WAIT_MS };
  const OWN = { minBytes: 65_536, maxWaitTime: 50 };
  afterEach(async () => {
    await Promise.all(loops.splice(0).map((l) => l.close()));
  });

  /** A consumer loop that batches as the services do (64 KiB or 50 ms), with or without the long poll. */
  const start = async (topic: string, idleWaitMs: number | undefined) => {
    const applied: number[] = [];
    /** When each run was handed to the processor: the fetch that brought it has returned by then. */
    const appliedAt: number[] = [];
    const fetches: Fetch[] = [];
    const groupId = uniqueName('idle-fetch-group');
    const loop = createConsumerLoop<Msg>({
      kafka,
      groupId,
      bindings: [{ topic, schema: Msg }],
      deadLetterTopic: `${topic}.dlq`,
      logger,
      minBytes: 65_536,
      maxWaitTimeInMs: 50,
      ...(idleWaitMs ? { idleWaitMs, idleAfterEmpty: AFTER_EMPTY } : {}),
      processor: {
        handles: () => true,
        async process(run) {
          applied.push(...run.map(({ event }) => event.n));
          appliedAt.push(Date.now());
          return run.map(() => ({ status: 'applied' as const }));
        },
      },
    });
    loop.consumer.on(loop.consumer.events.REQUEST, ({ payload }) => {
      if (payload.apiName === 'Fetch') fetches.push({ sentAt: payload.sentAt, duration: payload.duration });
    });
    loops.push(loop);
    await loop.start();
    return { applied, appliedAt, fetches, asked: (since: number, until = Infinity) => asked.filter((f) => f.groupId === groupId && f.at >= since && f.at <= until) };
  };
  const send = (topic: string, ns: number[]) => produceRaw(infra.kafkaBrokers, topic, ns.map((n) => ({ key: 'k', value: JSON.stringify({ type: 'Msg', taskId: 'k', n }) })));
  const topic = async () => {
    const name = uniqueName('idle-fetch-topic');
    await ensureTopics(kafka, [name, `${name}.dlq`], 1);
    return name;
  };

  it('fetches a few times in a quiet stretch where a plain batching consumer fetches every 50 ms, and still reads the next message', async () => {
    const t = await topic();
    const polling = await start(t, IDLE_WAIT_MS);
    const plain = await start(t, undefined);
    // The long poll has begun (after AFTER_EMPTY empty fetches) before the stretch is counted.
    await eventually(() => expect(polling.fetches.some((f) => f.duration >= IDLE_WAIT_MS - 50)).toBe(true), { timeoutMs: 10 * IDLE_WAIT_MS });
    const from = Date.now();
    await eventually(() => expect(polling.fetches.filter((f) => f.sentAt >= from).length).toBeGreaterThanOrEqual(3), { timeoutMs: 10 * IDLE_WAIT_MS });
    const until = Date.now();
    const within = (fs: readonly Fetch[]) => fs.filter((f) => f.sentAt >= from && f.sentAt + f.duration <= until);
    // A quiet fetch of the long poll is answered when its wait is out, never sooner.
    for (const f of within(polling.fetches)) expect(f.duration).toBeGreaterThanOrEqual(IDLE_WAIT_MS - 50);
    // Every fetch of the stretch asked for the long poll; the plain consumer's, for its 50 ms window.
    expect(polling.asked(from, until).map(settings)).toEqual(polling.asked(from, until).map(() => LONG_POLL));
    expect(plain.asked(from, until).length).toBeGreaterThan(0);
    expect(plain.asked(from, until).map(settings)).toEqual(plain.asked(from, until).map(() => OWN));
    await send(t, [1]);
    await eventually(() => expect(polling.applied).toEqual([1]));
    await eventually(() => expect(plain.applied).toEqual([1]));
  });

  it('answers a message at once while quiet, then batches again: the fetch after messages waits 50 ms, not the long poll', async () => {
    const t = await topic();
    const polling = await start(t, IDLE_WAIT_MS);
    // Quiet: a long-poll fetch has been answered, and the next one is waiting when the burst comes.
    await eventually(() => expect(polling.fetches.some((f) => f.duration >= IDLE_WAIT_MS - 50)).toBe(true), { timeoutMs: 10 * IDLE_WAIT_MS });
    await send(t, Array.from({ length: 20 }, (_, i) => i));
    await eventually(() => expect(polling.applied).toHaveLength(20));
    // The fetches after the burst: begun once the fetch that brought its first messages came back,
    // however long the producer took to connect meanwhile.
    const burstArrived = polling.appliedAt[0]!;
    const since = () => polling.asked(burstArrived);
    const isLong = (f: Asked) => f.maxWaitTime === IDLE_WAIT_MS;
    // Quiet again: the long poll is back once AFTER_EMPTY fetches came back empty.
    await eventually(() => expect(since().some(isLong)).toBe(true), { timeoutMs: 10 * IDLE_WAIT_MS });
    // Before it, the fetches after the burst asked for the consumer's own settings, AFTER_EMPTY of
    // them at least. A consumer left in the long poll would have asked for a second's wait there.
    const beforeLong = since().slice(0, since().findIndex(isLong));
    expect(beforeLong.length).toBeGreaterThanOrEqual(AFTER_EMPTY);
    expect(beforeLong.map(settings)).toEqual(beforeLong.map(() => OWN));
    expect(settings(since().find(isLong)!)).toEqual(LONG_POLL);
  });
});
