import { InMemorySpanExporter } from '@opentelemetry/sdk-trace-base';
import type { EachBatchPayload, KafkaMessage } from 'kafkajs';
import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { createMetrics, installTracePropagation, startTracing, type Tracing } from '@labelflow/telemetry';
import { captureLogs, metricValue } from '@labelflow/testing';
import type { RawMessage } from './codec';
import { createBatchHandler, type Delivery } from './consumer-batch';
import { createConsumerMetrics } from './consumer-metrics';
import { createRunApplier, type Step } from './consumer-retry';
import { createOffsetCommitter } from './offset-committer';

const Msg = z.object({ type: z.literal('Msg'), n: z.number() });
type Msg = z.infer<typeof Msg>;

const TRACE_A = '4bf92f3577b34da6a3ce929d0e0e4736';
const TRACE_B = '0af7651916cd43dd8448eb211c80319c';
const traceparent = (traceId: string) => `00-${traceId}-00f067aa0ba902b7-01`;

const message = (offset: number, value: string, traceId: string): KafkaMessage =>
  ({ offset: String(offset), key: null, value: Buffer.from(value), headers: { traceparent: traceparent(traceId) }, timestamp: '0', attributes: 0 }) as KafkaMessage;

/** A fetched batch as kafkajs hands it over, with what the handler resolved and committed. */
const fakePayload = (messages: KafkaMessage[], lastOffset = messages.at(-1)?.offset ?? '0') => {
  const resolved: string[] = [];
  const payload = {
    // `lastOffset` past the last message: records kafkajs hides (a commit marker, an aborted record).
    batch: { topic: 't', partition: 0, messages, lastOffset: () => lastOffset },
    resolveOffset: (offset: string) => resolved.push(offset),
    heartbeat: async () => undefined,
    commitOffsetsIfNecessary: async () => undefined,
    isRunning: () => true,
    isStale: () => false,
  } as unknown as EachBatchPayload;
  return { payload, resolved };
};

/** A handler whose processor fails every event for a reason that is not transient, and a dead-letter topic whose send `deadLetterStep` decides per message. */
const setup = (deadLetterStep: (raw: RawMessage) => Step = () => 'done') => {
  const registry = createMetrics({ service: 'batch-test', defaults: false });
  const metrics = createConsumerMetrics(registry);
  const log = captureLogs({ service: 'batch-test', level: 'error' }).logger;
  const raws = new WeakMap<Delivery<Msg>, RawMessage>();
  const deadLettered: string[] = [];
  const deadLetter = async (raw: RawMessage): Promise<Step> => {
    const step = deadLetterStep(raw);
    if (step === 'done') deadLettered.push(raw.offset);
    return step;
  };
  const processor = {
    handles: (type: string) => type === 'Msg',
    process: async (): Promise<never> => {
      throw Object.assign(new Error('bad row'), { code: 'BAD_ROW' });
    },
  };
  const apply = createRunApplier<Msg>({
    processor,
    retry: { initialMs: 1, maxMs: 2, maxAttempts: 1 },
    isRetriable: () => false,
    metrics,
    log,
    record: () => undefined,
    deadLetter: (delivery) => deadLetter(raws.get(delivery)!),
  });
  const handler = createBatchHandler<Msg>({ processor, bindings: [{ topic: 't', schema: Msg }], metrics, log, apply, deadLetter: (raw) => deadLetter(raw), raws, offsets: createOffsetCommitter({ log }) });
  return { handler, registry, deadLettered };
};

describe('the batch handler: what a poison message leaves in traces and metrics', () => {
  let tracing: Tracing | undefined;
  afterEach(async () => {
    await tracing?.shutdown();
    tracing = undefined;
  });

  it('ends a dead-lettered event’s span as failed and says so, and gives an unreadable message a failed span in its trace', async () => {
    installTracePropagation();
    const exporter = new InMemorySpanExporter();
    tracing = startTracing({ service: 'batch-test', logger: captureLogs({ service: 'batch-test', level: 'error' }).logger, env: { OTEL_EXPORTER_OTLP_ENDPOINT: 'http://127.0.0.1:4318' }, exporter });
    const { handler, deadLettered } = setup();
    const { payload, resolved } = fakePayload([message(1, JSON.stringify({ type: 'Msg', n: 1 }), TRACE_A), message(2, 'not json', TRACE_B)]);

    await handler(payload);
    await tracing.flush();

    expect(deadLettered).toEqual(['1', '2']);
    expect(resolved).toEqual(['1', '2']);
    const spans = exporter.getFinishedSpans();
    const poisoned = spans.find((s) => s.spanContext().traceId === TRACE_A && s.name === 'process Msg');
    expect(poisoned?.status.code).toBe(2); // ERROR
    expect(poisoned?.attributes).toMatchObject({ 'labelflow.outcome': 'dead_lettered', 'labelflow.dead_letter.code': 'BAD_ROW' });
    const unreadable = spans.find((s) => s.spanContext().traceId === TRACE_B);
    expect(unreadable?.name).toBe('process invalid message');
    expect(unreadable?.status.code).toBe(2);
    expect(unreadable?.attributes).toMatchObject({ 'labelflow.outcome': 'invalid', 'labelflow.dead_letter.code': 'MESSAGING_DECODE_FAILED', 'messaging.kafka.offset': '2' });
  });

  it('counts a message as dead-lettered or invalid once, when it is on the dead-letter topic, not again for a send a rebalance interrupted', async () => {
    // Each message's first send is interrupted (the batch is taken away); the refetch's goes through.
    const tried = new Set<string>();
    const { handler, registry, deadLettered } = setup((raw) => (tried.has(raw.offset) ? 'done' : (tried.add(raw.offset), 'aborted')));
    const all = [message(1, JSON.stringify({ type: 'Msg', n: 1 }), TRACE_A), message(2, 'not json', TRACE_B)];
    const resolved: string[] = [];
    for (let fetch = 0; fetch < 5 && resolved.length < all.length; fetch++) {
      const refetch = fakePayload(all.filter((m) => !resolved.includes(m.offset)));
      await handler(refetch.payload);
      resolved.push(...refetch.resolved);
    }

    expect(deadLettered).toEqual(['1', '2']);
    const text = await registry.render();
    expect(metricValue(text, 'consumer_messages_total', { outcome: 'dead_lettered' })).toBe(1);
    expect(metricValue(text, 'consumer_messages_total', { outcome: 'invalid' })).toBe(1);
  });
});

describe('the batch handler: records kafkajs hides', () => {
  it('resolves past a commit marker after the last message once the batch is done, and not when the batch was cut short', async () => {
    const { handler } = setup((raw) => (raw.offset === '1' ? 'aborted' : 'done'));
    const done = fakePayload([message(1, 'not json', TRACE_A)], '2');
    // The dead letter of offset 1 is interrupted: nothing past it may be resolved.
    await handler(done.payload);
    expect(done.resolved).toEqual([]);
    const { handler: healthy } = setup();
    const again = fakePayload([message(1, 'not json', TRACE_A)], '2');
    await healthy(again.payload);
    expect(again.resolved).toEqual(['1', '2']);
    // A readable event last whose run is cut short (its dead letter interrupted): nothing past it either.
    const { handler: interrupted } = setup(() => 'aborted');
    const cut = fakePayload([message(1, JSON.stringify({ type: 'Msg', n: 1 }), TRACE_A)], '2');
    await interrupted(cut.payload);
    expect(cut.resolved).toEqual([]);
    const plain = fakePayload([message(1, 'not json', TRACE_A)]);
    await healthy(plain.payload);
    expect(plain.resolved).toEqual(['1']);
  });
});
