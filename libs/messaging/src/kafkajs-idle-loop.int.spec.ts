import { createRequire } from 'node:module';
import { afterEach, describe, expect, inject, it } from 'vitest';
import { z } from 'zod';
import { createLogger, createMetrics } from '@labelflow/telemetry';
import { eventually, produceRaw, uniqueName } from '@labelflow/testing';
import { createConsumerLoop, createKafka, ensureTopics, type ConsumerLoop } from './index';

const infra = inject('infra');
const Msg = z.object({ type: z.literal('Msg'), taskId: z.string(), n: z.number().int() });
type Msg = z.infer<typeof Msg>;

// The class kafkajs's connections use, reached the way the fix reaches it: if the fix patched
// another copy than the one `createKafka`'s clients load, the count below would show it.
const RequestQueue = createRequire(import.meta.url)('kafkajs/src/network/requestQueue/index.js') as { prototype: { checkPendingRequests(this: unknown): void } };

describe('a consumer built with createKafka, idle on a real broker', () => {
  const loops: ConsumerLoop[] = [];
  afterEach(async () => {
    await Promise.all(loops.splice(0).map((l) => l.close()));
  });

  it('checks its request queues about once per answered request, not every millisecond', async () => {
    const topic = uniqueName('idle-topic');
    const logger = createLogger({ service: 'kafkajs-idle-test', level: 'warn' });
    const kafka = createKafka({ brokers: infra.kafkaBrokers.split(','), clientId: 'kafkajs-idle-test', logger });
    await ensureTopics(kafka, [topic, `${topic}.dlq`], 3);
    const applied: number[] = [];
    const loop = createConsumerLoop<Msg>({
      kafka,
      groupId: uniqueName('group'),
      bindings: [{ topic, schema: Msg }],
      deadLetterTopic: `${topic}.dlq`,
      logger,
      metrics: createMetrics({ service: 'kafkajs-idle-test', defaults: false }),
      // The services' fetch settings: a fetch comes back after 50 ms when nothing arrives.
      minBytes: 65_536,
      maxWaitTimeInMs: 50,
      processor: {
        handles: () => true,
        async process(run) {
          applied.push(...run.map(({ event }) => event.n));
          return run.map(() => ({ status: 'applied' as const }));
        },
      },
    });
    loops.push(loop);
    await loop.start();
    await produceRaw(infra.kafkaBrokers, topic, [{ key: 'k', value: JSON.stringify({ type: 'Msg', taskId: 'k', n: 1 }) }]);
    await eventually(() => expect(applied).toEqual([1]));

    const original = RequestQueue.prototype.checkPendingRequests;
    let checks = 0;
    RequestQueue.prototype.checkPendingRequests = function (this: unknown) {
      checks++;
      original.call(this);
    };
    try {
      await new Promise((resolve) => setTimeout(resolve, 1_000));
    } finally {
      RequestQueue.prototype.checkPendingRequests = original;
    }
    // About twenty empty fetches and a heartbeat a second are answered, each one check. Unfixed,
    // every connection that has answered a request checks about a thousand times a second.
    expect(checks, `${checks} queue checks in 1 s`).toBeGreaterThan(0);
    expect(checks, `${checks} queue checks in 1 s`).toBeLessThan(200);
  });
});
