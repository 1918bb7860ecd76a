import { Partitioners, type Consumer, type EachBatchPayload, type Kafka, type KafkaMessage, type Producer } from 'kafkajs';
import type { z } from 'zod';
import { withSpan, type Logger, type Metrics } from '@labelflow/telemetry';
import { coordinates, decodeMessage, headersToStrings, type RawMessage } from './codec';
import { MessagingErrors } from './errors';

/** What a handler reports for one event; a throw means "not applied" (retry or dead-letter). */
export type HandleOutcome =
  | { readonly status: 'applied' }
  | { readonly status: 'duplicate'; readonly tier: string }
  | { readonly status: 'ignored'; readonly reason: string };

export interface MessageMeta {
  readonly topic: string;
  readonly partition: number;
  readonly offset: string;
  readonly headers: Readonly<Record<string, string>>;
  /** `topic/partition@offset`. */
  readonly source: string;
}

export interface TopicBinding<E> {
  readonly topic: string;
  readonly schema: z.ZodType<E>;
}

/** The dedup gate's verdict on one message, before its handler runs (see @labelflow/dedup). */
export type GateVerdict = { readonly kind: 'duplicate'; readonly tier: string } | { readonly kind: 'proceed' } | { readonly kind: 'busy' };

/**
 * A dedup gate in front of the handler: checked once per batch, told which events committed and
 * which did not. The handler's own transaction stays the authority; the gate only saves work.
 */
export interface ConsumerGate<E> {
  check(events: readonly E[]): Promise<readonly GateVerdict[]>;
  committed(events: readonly E[]): Promise<void>;
  released(events: readonly E[]): Promise<void>;
}

export interface RetryPolicy {
  readonly initialMs: number;
  readonly maxMs: number;
  /** Failures of a non-retriable kind before the message is dead-lettered. */
  readonly maxAttempts: number;
}

export interface ConsumerLoopOptions<E> {
  readonly kafka: Kafka;
  readonly groupId: string;
  readonly bindings: readonly TopicBinding<E>[];
  readonly handle: (event: E, meta: MessageMeta) => Promise<HandleOutcome>;
  readonly gate?: ConsumerGate<E>;
  /** Dead-letter topic for this consumer: poison messages land here with their original bytes. */
  readonly deadLetterTopic: string;
  readonly logger: Logger;
  readonly metrics?: Metrics;
  /** True when waiting can fix the failure (database or broker down): retried without limit. */
  readonly isRetriable?: (error: unknown) => boolean;
  readonly retry?: Partial<RetryPolicy>;
  readonly partitionsConsumedConcurrently?: number;
  readonly sessionTimeoutMs?: number;
}

export interface ConsumerLoop {
  start(): Promise<void>;
  close(): Promise<void>;
  readonly consumer: Consumer;
}

const defaultRetry: RetryPolicy = { initialMs: 100, maxMs: 5_000, maxAttempts: 5 };
const defaultIsRetriable = (error: unknown) => (error as { retriable?: boolean }).retriable === true;

type Step = 'done' | 'aborted';

/**
 * The consumer shell every service uses: decode, hand to the handler (which dedups and commits its
 * effect in one transaction), and only then resolve the offset. An offset is never committed for a
 * message whose effect did not commit, was not proven a duplicate, and was not dead-lettered.
 * Transient failures hold the partition and retry with backoff; poison goes to the dead-letter topic.
 */
export function createConsumerLoop<E extends { readonly type: string }>(options: ConsumerLoopOptions<E>): ConsumerLoop {
  const { kafka, groupId, bindings, handle, gate, deadLetterTopic, logger, metrics } = options;
  const retry = { ...defaultRetry, ...options.retry };
  const isRetriable = options.isRetriable ?? defaultIsRetriable;
  const schemas = new Map(bindings.map((b) => [b.topic, b.schema]));
  const log = logger.child({ component: 'consumer', groupId });
  const consumer = kafka.consumer({
    groupId,
    sessionTimeout: options.sessionTimeoutMs ?? 30_000,
    heartbeatInterval: Math.min(3_000, Math.floor((options.sessionTimeoutMs ?? 30_000) / 3)),
    allowAutoTopicCreation: false,
  });
  const dlqProducer: Producer = kafka.producer({ idempotent: true, maxInFlightRequests: 1, allowAutoTopicCreation: false, createPartitioner: Partitioners.DefaultPartitioner });

  const processed = metrics?.counter('consumer_messages_total', 'Consumed messages by outcome', ['topic', 'type', 'outcome']);
  const latency = metrics?.histogram('consumer_processing_seconds', 'Time from receipt to committed effect', ['topic', 'type']);
  const retries = metrics?.counter('consumer_retries_total', 'Handler attempts that failed and were retried', ['topic', 'kind']);
  const duplicates = metrics?.counter('dedup_duplicates_total', 'Duplicate deliveries caught, by the tier that caught them', ['tier']);
  const deadLettered = metrics?.counter('consumer_dead_lettered_total', 'Messages sent to the dead-letter topic', ['topic', 'code']);

  const backoff = (attempt: number) => Math.min(retry.maxMs, retry.initialMs * 2 ** Math.min(attempt, 16)) * (0.5 + Math.random() / 2);

  async function waitOrAbort(ms: number, payload: EachBatchPayload): Promise<boolean> {
    const until = Date.now() + ms;
    while (Date.now() < until) {
      if (!payload.isRunning() || payload.isStale()) return false;
      await new Promise((r) => setTimeout(r, Math.min(250, until - Date.now())));
      await payload.heartbeat();
    }
    return payload.isRunning() && !payload.isStale();
  }

  /**
   * Publishes the message to the dead-letter topic, retrying until it is there: an unreachable broker
   * must not let the consumer skip it. The one failure that retrying cannot fix is a message the
   * dead-letter topic refuses as too large (it arrived compressed, or the topic's limit is lower):
   * then the record goes without its value, with every header and the source coordinates, where
   * the original can still be read.
   */
  async function deadLetter(raw: RawMessage, code: string, reason: string, payload: EachBatchPayload): Promise<Step> {
    let omitValue = false;
    for (let attempt = 0; ; attempt++) {
      try {
        await dlqProducer.send({
          topic: deadLetterTopic,
          acks: -1,
          messages: [{
            key: raw.key,
            value: omitValue ? null : raw.value,
            headers: {
              ...raw.headers,
              ...(omitValue ? { 'dlq-value-omitted': 'MESSAGE_TOO_LARGE' } : {}),
              'dlq-error-code': code,
              'dlq-error-message': reason.slice(0, 4000),
              'dlq-source-topic': raw.topic,
              'dlq-source-partition': String(raw.partition),
              'dlq-source-offset': raw.offset,
              'dlq-consumer-group': groupId,
              'dlq-failed-at': new Date().toISOString(),
            },
          }],
        });
        deadLettered?.inc({ topic: raw.topic, code });
        log.error({ source: coordinates(raw), code, reason, deadLetterTopic }, 'message dead-lettered');
        return 'done';
      } catch (error) {
        if (!omitValue && isTooLarge(error)) {
          log.warn({ source: coordinates(raw), bytes: raw.value?.length }, 'dead-letter topic refused the message as too large; sending it without its value');
          omitValue = true;
          continue;
        }
        log.warn({ err: error, source: coordinates(raw) }, 'dead-letter publish failed; retrying');
        if (!(await waitOrAbort(backoff(attempt), payload))) return 'aborted';
      }
    }
  }

  type Item = { readonly raw: RawMessage; readonly event?: E; readonly invalid?: { readonly code: string; readonly message: string } };

  /**
   * Never throws: a message that cannot even be read is dead-lettered like any other poison. A throw
   * here would escape the batch before any offset is resolved, and kafkajs would refetch the same
   * batch forever.
   */
  function prepare(topic: string, partition: number, message: KafkaMessage): Item {
    const raw: RawMessage = { topic, partition, offset: message.offset, key: message.key, value: message.value, headers: {} };
    try {
      const readable = { ...raw, headers: headersToStrings(message.headers) };
      const schema = schemas.get(topic);
      if (!schema) return { raw: readable, invalid: { code: MessagingErrors.UNBOUND_TOPIC, message: `no schema bound for topic ${topic}` } };
      const decoded = decodeMessage(schema, readable);
      return decoded.ok ? { raw: readable, event: decoded.event } : { raw: readable, invalid: decoded.reason };
    } catch (error) {
      return { raw, invalid: { code: MessagingErrors.DECODE_FAILED, message: `message could not be read: ${(error as Error).message}` } };
    }
  }

  /** Retries a step that may fail transiently (the gate's inbox lookup) until it succeeds or the consumer stops. */
  async function persist<T>(what: string, work: () => Promise<T>, payload: EachBatchPayload): Promise<{ ok: true; value: T } | { ok: false }> {
    for (let attempt = 0; ; attempt++) {
      try {
        return { ok: true, value: await work() };
      } catch (error) {
        retries?.inc({ topic: payload.batch.topic, kind: 'transient' });
        log.warn({ err: error, attempt }, `${what} failed; retrying`);
        if (!(await waitOrAbort(backoff(attempt), payload))) return { ok: false };
      }
    }
  }

  /** Waits out another consumer's live lease on the same key (a rebalance in flight). */
  async function awaitLease(gate: ConsumerGate<E>, event: E, payload: EachBatchPayload): Promise<GateVerdict | undefined> {
    for (let attempt = 0; ; attempt++) {
      retries?.inc({ topic: payload.batch.topic, kind: 'busy' });
      if (!(await waitOrAbort(backoff(attempt), payload))) return undefined;
      const checked = await persist('dedup check', () => gate.check([event]), payload);
      if (!checked.ok) return undefined;
      const verdict = checked.value[0];
      if (verdict && verdict.kind !== 'busy') return verdict;
    }
  }

  async function processItem(item: Item, verdict: GateVerdict | undefined, payload: EachBatchPayload, committed: E[]): Promise<Step> {
    const { raw, event } = item;
    const topic = raw.topic;
    if (!event) {
      const invalid = item.invalid ?? { code: MessagingErrors.DECODE_FAILED, message: 'undecodable' };
      processed?.inc({ topic, type: 'invalid', outcome: 'invalid' });
      log.warn({ source: coordinates(raw), code: invalid.code, reason: invalid.message }, 'invalid message skipped');
      return deadLetter(raw, invalid.code, invalid.message, payload);
    }
    if (verdict?.kind === 'busy' && gate) {
      const settled = await awaitLease(gate, event, payload);
      if (!settled) return 'aborted';
      verdict = settled;
    }
    if (verdict?.kind === 'duplicate') {
      processed?.inc({ topic, type: event.type, outcome: 'duplicate' });
      duplicates?.inc({ tier: verdict.tier });
      committed.push(event);
      return 'done';
    }
    const meta: MessageMeta = { topic, partition: raw.partition, offset: raw.offset, headers: raw.headers, source: coordinates(raw) };
    const started = process.hrtime.bigint();
    for (let attempt = 0, poisonCount = 0; ; attempt++) {
      try {
        const outcome = await withSpan(`consume ${event.type}`, 'consumer', raw.headers, { 'messaging.destination': topic, 'messaging.kafka.offset': raw.offset }, () => handle(event, meta));
        processed?.inc({ topic, type: event.type, outcome: outcome.status });
        latency?.observe({ topic, type: event.type }, Number(process.hrtime.bigint() - started) / 1e9);
        if (outcome.status === 'duplicate') duplicates?.inc({ tier: outcome.tier });
        if (outcome.status === 'ignored') log.info({ source: meta.source, type: event.type, reason: outcome.reason }, 'event ignored');
        committed.push(event);
        return 'done';
      } catch (error) {
        const transient = isRetriable(error);
        if (!transient) poisonCount++;
        retries?.inc({ topic, kind: transient ? 'transient' : 'failure' });
        if (!transient && poisonCount >= retry.maxAttempts) {
          processed?.inc({ topic, type: event.type, outcome: 'dead_lettered' });
          const code = (error as { code?: string }).code ?? MessagingErrors.HANDLER_FAILED;
          return deadLetter(raw, code, `handler failed ${poisonCount} times: ${(error as Error).message}`, payload);
        }
        log.warn({ err: error, source: meta.source, type: event.type, attempt, transient }, 'handler failed; retrying');
        if (!(await waitOrAbort(backoff(attempt), payload))) return 'aborted';
      }
    }
  }

  async function processBatch(payload: EachBatchPayload): Promise<void> {
    const { batch } = payload;
    const items = batch.messages.map((m) => prepare(batch.topic, batch.partition, m));
    const events = items.flatMap((i) => (i.event ? [i.event] : []));
    let verdicts = new Map<E, GateVerdict>();
    if (gate && events.length > 0) {
      const checked = await persist('dedup check', () => gate.check(events), payload);
      if (!checked.ok) return;
      verdicts = new Map(events.map((e, i) => [e, checked.value[i] ?? { kind: 'proceed' }]));
    }
    const committed: E[] = [];
    try {
      for (const item of items) {
        if (!payload.isRunning() || payload.isStale()) break;
        const step = await processItem(item, item.event && verdicts.get(item.event), payload, committed);
        if (step === 'aborted') break;
        payload.resolveOffset(item.raw.offset);
        await payload.heartbeat();
      }
    } finally {
      // One round trip each per batch. Leases of events that did not commit (stopped, dead-lettered)
      // are released so a redelivery is not held up until they expire.
      if (gate && events.length > 0) {
        const done = new Set(committed);
        await gate.committed(committed);
        await gate.released(events.filter((e) => !done.has(e)));
      }
    }
    await payload.commitOffsetsIfNecessary();
  }

  return {
    consumer,
    async start() {
      await dlqProducer.connect();
      await consumer.connect();
      for (const { topic } of bindings) await consumer.subscribe({ topic, fromBeginning: true });
      await consumer.run({
        eachBatchAutoResolve: false,
        autoCommit: true,
        autoCommitInterval: 1_000,
        partitionsConsumedConcurrently: options.partitionsConsumedConcurrently ?? 3,
        eachBatch: processBatch,
      });
    },
    async close() {
      await consumer.disconnect();
      await dlqProducer.disconnect();
    },
  };
}

/** kafkajs reports the broker's MESSAGE_TOO_LARGE / RECORD_LIST_TOO_LARGE directly or wrapped. */
function isTooLarge(error: unknown): boolean {
  for (let e = error as { type?: unknown; cause?: unknown; originalError?: unknown } | undefined, depth = 0; e && depth < 5; depth++) {
    if (e.type === 'MESSAGE_TOO_LARGE' || e.type === 'RECORD_LIST_TOO_LARGE') return true;
    e = (e.originalError ?? e.cause) as typeof e;
  }
  return false;
}
