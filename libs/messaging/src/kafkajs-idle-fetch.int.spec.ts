import { afterEach, describe, expect, inject, it } from 'vitest';
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

describe('the idle long poll of a batching consumer', () => {
  const loops: ConsumerLoop[] = [];
  afterEach(async () => {
    await Promise.all(loops.splice(0).map((l) => l.close()));
  });

  /** A consumer loop that batches as the services do (64 KiB or 50 ms), with or without the long poll. */
  const start = async (topic: string, idleWaitMs: number | undefined) => {
    const applied: number[] = [];
    /** When each run was handed to the processor: the fetch that brought it has returned by then. */
    const appliedAt: number[] = [];
    const fetches: Fetch[] = [];
    const loop = createConsumerLoop<Msg>({
      kafka,
      groupId: uniqueName('idle-fetch-group'),
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
    return { applied, appliedAt, fetches };
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
    expect(within(plain.fetches).length).toBeGreaterThan(4 * within(polling.fetches).length);
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
    // The fetches after the burst: sent once the fetch that brought its first messages came back,
    // however long the producer took to connect meanwhile.
    const burstArrived = polling.appliedAt[0]!;
    const since = () => polling.fetches.filter((f) => f.sentAt >= burstArrived);
    const isLong = (f: Fetch) => f.duration >= IDLE_WAIT_MS - 50;
    // Quiet again: the long poll is back once a fetch comes back empty.
    await eventually(() => expect(since().some(isLong)).toBe(true), { timeoutMs: 10 * IDLE_WAIT_MS });
    // Before it, the fetches after the burst used the consumer's own settings, AFTER_EMPTY of them:
    // answered after 50 ms, empty. A consumer left in the long poll would wait a second there.
    const beforeLong = since().slice(0, since().findIndex(isLong));
    expect(beforeLong.length).toBeGreaterThanOrEqual(AFTER_EMPTY);
    for (const f of beforeLong) expect(f.duration).toBeLessThan(IDLE_WAIT_MS / 2);
  });
});
