import type { EachBatchPayload, KafkaMessage } from 'kafkajs';
import type { z } from 'zod';
import { runLinked, startSpan, tracingEnabled, type Logger, type SagaFacts, type TraceSpan } from '@labelflow/telemetry';
import { coordinates, decodeMessage, headersToStrings, type RawMessage } from './codec';
import type { ConsumerMetrics } from './consumer-metrics';
import type { ApplyRun, Step } from './consumer-retry';
import type { DeadLetter } from './dead-letter';
import { MessagingErrors } from './errors';
import type { CommitSender, NextOffset, OffsetCommitter } from './offset-committer';

/** The header every labelflow producer stamps with the event's type, so consumers can skip unread. */
export const EVENT_TYPE_HEADER = 'event-type';

/** What became of one delivered event once its batch committed. */
export type DeliveryOutcome =
  | { readonly status: 'applied' }
  | { readonly status: 'duplicate'; readonly tier: string }
  /** The service refused it (a stale attempt, a cancelled task): `code` is the refusal's stable code. */
  | { readonly status: 'ignored'; readonly code: string; readonly reason: string };

export interface MessageMeta {
  readonly topic: string;
  readonly partition: number;
  readonly offset: string;
  readonly headers: Readonly<Record<string, string>>;
  /** `topic/partition@offset`. */
  readonly source: string;
  /**
   * The record's Kafka timestamp (epoch ms): when its producer sent it, for labelflow's events when
   * the relay published them, which may be well after `occurredAt` while a relay lags.
   */
  readonly timestamp: number;
}

export interface Delivery<E> {
  readonly event: E;
  readonly meta: MessageMeta;
}

export interface TopicBinding<E> {
  readonly topic: string;
  readonly schema: z.ZodType<E>;
  /**
   * The event types the topic carries (the contracts' list). With it, an `event-type` header is
   * trusted to skip a message only when it names one of them, and only when the body does not name
   * a type the service handles: a producer whose header lies about an event the service reacts to,
   * or names no known type at all, gets its message decoded, and the body decides. Without it,
   * any header of a type the service does not handle skips the message unread.
   */
  readonly types?: readonly string[];
}

/** Distinct `type` labels `consumer_skipped_total` takes from headers of a topic without a type list; beyond: `other`. */
const MAX_HEADER_LABELS = 64;
const JSON_ESCAPE = Buffer.from('\\u');

/**
 * The one port between the Kafka loop and a service's exactly-once shell. `process` applies a run
 * of decoded deliveries atomically (all of them or none) and reports one outcome per delivery, in
 * order; a throw means none was applied. The loop owns everything Kafka: decoding, skipping what
 * the service does not read, retries, isolating a poison message, dead letters and offsets.
 */
export interface BatchProcessor<E> {
  /** False for event types the service never reacts to: skipped before decoding or any round trip. */
  handles(type: string): boolean;
  process(deliveries: readonly Delivery<E>[]): Promise<readonly DeliveryOutcome[]>;
}

/** The span of each delivery being processed while tracing records; `recordOutcomes` notes what became of it. */
const deliverySpans = new WeakMap<Delivery<unknown>, TraceSpan>();

/**
 * Ends a dead-lettered delivery's span as failed, saying why: the consumer carried on, but the
 * event was not applied, and a trace must not show a poison message as a healthy consume.
 */
export function markDeadLettered(delivery: Delivery<unknown>, code: string): void {
  deliverySpans.get(delivery)?.end({ failed: true, attributes: { 'labelflow.outcome': 'dead_lettered', 'labelflow.dead_letter.code': code } });
}

/**
 * A message that could not be read still continues the trace its headers carry, as a failed
 * consume: without it the trace would end at the producer's publish, as if nobody had read it. The
 * name is fixed (a foreign producer's type header is not a span name).
 */
function traceInvalid(raw: RawMessage, code: string): void {
  startSpan('process invalid message', {
    kind: 'consumer',
    headers: raw.headers,
    attributes: {
      'messaging.system': 'kafka',
      'messaging.operation.type': 'process',
      'messaging.destination.name': raw.topic,
      'messaging.destination.partition.id': String(raw.partition),
      'messaging.kafka.offset': raw.offset,
      'labelflow.outcome': 'invalid',
      'labelflow.dead_letter.code': code,
    },
  })?.end({ failed: true });
}

/** Runs `work` linked to the trace of every delivery (one call applying several partitions' runs). */
export function linkedToDeliveries<T>(deliveries: readonly Delivery<unknown>[], work: () => Promise<T>): Promise<T> {
  if (!tracingEnabled()) return work();
  return runLinked(
    deliveries.flatMap((d) => deliverySpans.get(d) ?? []),
    work,
  );
}

/** The saga facts an event carries, read without knowing its type (the loop is generic). */
function factsOf(event: { readonly type: string }): SagaFacts {
  const { taskId, projectId, attempt } = event as { taskId?: unknown; projectId?: unknown; attempt?: unknown };
  return {
    eventType: event.type,
    ...(typeof taskId === 'string' ? { taskId } : {}),
    ...(typeof projectId === 'string' ? { projectId } : {}),
    ...(typeof attempt === 'number' ? { attempt } : {}),
  };
}

/** One fetched message, read as far as it can be: skipped, decoded, or unreadable. */
type Item<E> =
  | { readonly kind: 'skip'; readonly raw: RawMessage; readonly type: string }
  | { readonly kind: 'event'; readonly raw: RawMessage; readonly delivery: Delivery<E> }
  | { readonly kind: 'invalid'; readonly raw: RawMessage; readonly code: string; readonly message: string };

export interface OutcomeDeps {
  readonly metrics: ConsumerMetrics;
  readonly log: Logger;
}

/** Counts and logs what became of each delivery of a run the processor applied. */
export function recordOutcomes<E extends { readonly type: string }>({ metrics, log }: OutcomeDeps, deliveries: readonly Delivery<E>[], outcomes: readonly DeliveryOutcome[], started: bigint): void {
  const seconds = Number(process.hrtime.bigint() - started) / 1e9;
  const tracing = tracingEnabled();
  // Counted per label set once per run, not once per delivery: a metric's labels are hashed on every call.
  const tally = new Map<string, { topic: string; type: string; outcome: DeliveryOutcome; n: number }>();
  deliveries.forEach((delivery, i) => {
    const { event, meta } = delivery;
    const outcome = outcomes[i] ?? { status: 'applied' };
    if (tracing) deliverySpans.get(delivery)?.annotate({}, { 'labelflow.outcome': outcome.status, ...(outcome.status === 'ignored' ? { 'labelflow.refusal': outcome.code } : {}) });
    const key = `${meta.topic}\0${event.type}\0${outcome.status}\0${outcome.status === 'duplicate' ? outcome.tier : outcome.status === 'ignored' ? outcome.code : ''}`;
    const entry = tally.get(key);
    if (entry) entry.n++;
    else tally.set(key, { topic: meta.topic, type: event.type, outcome, n: 1 });
    if (outcome.status === 'ignored') log.debug({ source: meta.source, type: event.type, code: outcome.code, reason: outcome.reason }, 'event ignored');
  });
  const latencies = new Map<string, { topic: string; type: string; n: number }>();
  for (const { topic, type, outcome, n } of tally.values()) {
    metrics.processed?.inc({ topic, type, outcome: outcome.status }, n);
    if (outcome.status === 'duplicate') metrics.duplicates?.inc({ tier: outcome.tier }, n);
    if (outcome.status === 'ignored') metrics.ignored?.inc({ topic, type, code: outcome.code }, n);
    const lkey = `${topic}\0${type}`;
    const l = latencies.get(lkey);
    if (l) l.n += n;
    else latencies.set(lkey, { topic, type, n });
  }
  // Every delivery of a run took the run's time: one child per label set, observed once per delivery.
  for (const { topic, type, n } of latencies.values()) {
    const child = metrics.latency?.labels({ topic, type });
    for (let i = 0; i < n; i++) child?.observe(seconds);
  }
}

export interface BatchHandlerDeps<E> {
  readonly processor: BatchProcessor<E>;
  readonly bindings: readonly TopicBinding<E>[];
  readonly metrics: ConsumerMetrics;
  readonly log: Logger;
  readonly apply: ApplyRun<E>;
  readonly deadLetter: DeadLetter;
  /** Where each decoded delivery's original message is kept, for dead-lettering it later. */
  readonly raws: WeakMap<Delivery<E>, RawMessage>;
  /** Commits the resolved offsets once per batch, one request for every batch done meanwhile. */
  readonly offsets: OffsetCommitter;
}

/**
 * kafkajs's eachBatch. Per fetched batch: skip what the service does not read, decode the rest,
 * hand each run of decoded events to the processor as one unit, and only then resolve the offsets.
 */
export function createBatchHandler<E extends { readonly type: string }>(deps: BatchHandlerDeps<E>): (payload: EachBatchPayload) => Promise<void> {
  const { processor, metrics, log, apply, deadLetter, raws, offsets } = deps;
  const schemas = new Map(deps.bindings.map((b) => [b.topic, b.schema]));
  /** Per topic with a type list: the types it carries, and each handled one quoted, as a body would name it. */
  const trust = new Map(
    deps.bindings.flatMap((b) =>
      b.types ? [[b.topic, { known: new Set(b.types), handled: b.types.filter((t) => processor.handles(t)).map((t) => Buffer.from(JSON.stringify(t))) }] as const] : [],
    ),
  );
  const headerLabels = new Set<string>();

  /**
   * Whether a type header lets the message skip unread: a type the service does not handle, and,
   * on a topic with a type list, one the topic carries in a body that names no handled type (a
   * quoted name anywhere is enough to decode it: the safe side of a cheap byte search).
   */
  function skipsUnread(topic: string, type: string, value: Buffer | null): boolean {
    if (processor.handles(type)) return false;
    const rules = trust.get(topic);
    if (!rules) return true;
    if (!rules.known.has(type)) return false;
    // A JSON escape (`\u0051aPassed`) could spell a handled name the byte search misses: decode.
    return value === null || (!value.includes(JSON_ESCAPE) && !rules.handled.some((name) => value.includes(name)));
  }

  /** A header's type as a label: bounded however many distinct values a producer sends. */
  function headerLabel(topic: string, type: string): string {
    if (trust.has(topic) || headerLabels.has(type)) return type;
    if (headerLabels.size >= MAX_HEADER_LABELS) return 'other';
    headerLabels.add(type);
    return type;
  }

  /**
   * Never throws: a message that cannot even be read is dead-lettered like any other poison. A throw
   * here would escape the batch before any offset is resolved, and kafkajs would refetch the same
   * batch forever. The type header lets a message the service never reads skip JSON and schema
   * work; without the header (a foreign producer) the decoded body decides.
   */
  function prepare(topic: string, partition: number, message: KafkaMessage): Item<E> {
    const raw: RawMessage = { topic, partition, offset: message.offset, key: message.key, value: message.value, headers: {} };
    try {
      const readable = { ...raw, headers: headersToStrings(message.headers) };
      const typeHeader = readable.headers[EVENT_TYPE_HEADER];
      if (typeHeader !== undefined && skipsUnread(topic, typeHeader, message.value)) return { kind: 'skip', raw: readable, type: headerLabel(topic, typeHeader) };
      const schema = schemas.get(topic);
      if (!schema) return { kind: 'invalid', raw: readable, code: MessagingErrors.UNBOUND_TOPIC, message: `no schema bound for topic ${topic}` };
      const decoded = decodeMessage(schema, readable);
      if (!decoded.ok) return { kind: 'invalid', raw: readable, ...decoded.reason };
      if (!processor.handles(decoded.event.type)) return { kind: 'skip', raw: readable, type: decoded.event.type };
      const meta: MessageMeta = { topic, partition, offset: message.offset, headers: readable.headers, source: coordinates(readable), timestamp: Number(message.timestamp) };
      return { kind: 'event', raw: readable, delivery: { event: decoded.event, meta } };
    } catch (error) {
      return { kind: 'invalid', raw, code: MessagingErrors.DECODE_FAILED, message: `message could not be read: ${(error as Error).message}` };
    }
  }

  /** One OffsetCommit through the payload: unlike `consumer.commitOffsets`, it still commits while the consumer stops. */
  const sender = (payload: EachBatchPayload): CommitSender =>
    Object.assign(
      (next: readonly NextOffset[]) => {
        const topics = new Map<string, { partition: number; offset: string }[]>();
        for (const { topic, partition, offset } of next) topics.set(topic, [...(topics.get(topic) ?? []), { partition, offset }]);
        return payload.commitOffsetsIfNecessary({ topics: [...topics].map(([topic, partitions]) => ({ topic, partitions })) });
      },
      { usable: () => payload.isRunning() },
    );

  return async function processBatch(payload: EachBatchPayload): Promise<void> {
    try {
      await consume(payload);
    } finally {
      // Also after an aborted batch: what it did finish is committed, as kafkajs's auto-commit would.
      await offsets.commit(sender(payload));
    }
  };

  async function consume(payload: EachBatchPayload): Promise<void> {
    const { batch } = payload;
    const items = batch.messages.map((m) => prepare(batch.topic, batch.partition, m));
    let run: Delivery<E>[] = [];
    const resolve = (offset: string) => {
      payload.resolveOffset(offset);
      offsets.resolved(batch.topic, batch.partition, offset);
    };
    // Runs of decodable events go to the processor together; a skipped or unreadable message in
    // between only needs its offset, once everything before it is done.
    const flush = async (): Promise<Step> => {
      if (run.length === 0) return 'done';
      const current = run;
      run = [];
      const step = tracingEnabled() ? await applyTraced(current.map(traced)) : await apply(current, payload, onDone);
      if (step === 'done') await payload.heartbeat();
      return step;
    };
    const onDone = (last: Delivery<E>) => resolve(last.meta.offset);

    /** One delivery: the run's transaction is part of its trace. Several: it belongs to none of their traces alone, and links to each. */
    const applyTraced = async (current: readonly Delivery<E>[]): Promise<Step> => {
      const spans = current.flatMap((d) => deliverySpans.get(d) ?? []);
      const [only] = spans;
      const work = () => apply(current, payload, onDone);
      let step: Step;
      try {
        step = spans.length === 1 && only ? await only.run(work) : await runLinked(spans, work);
      } catch (error) {
        for (const span of spans) span.end({ error });
        throw error;
      }
      for (const span of spans) span.end(step === 'aborted' ? { attributes: { 'labelflow.outcome': 'aborted' } } : undefined);
      return step;
    };

    /**
     * The delivery again, with a span continuing the trace its headers carry (the publish span),
     * and those headers now continuing this span: the processor's own spans, and the events it
     * emits, hang under the delivery. The original message (for a dead letter) is unchanged.
     */
    const traced = (delivery: Delivery<E>): Delivery<E> => {
      const { event, meta } = delivery;
      const span = startSpan(`process ${event.type}`, {
        kind: 'consumer',
        headers: meta.headers,
        facts: factsOf(event),
        attributes: { 'messaging.system': 'kafka', 'messaging.operation.type': 'process', 'messaging.destination.name': meta.topic, 'messaging.destination.partition.id': String(meta.partition), 'messaging.kafka.offset': meta.offset },
      });
      if (!span) return delivery;
      const next: Delivery<E> = { event, meta: { ...meta, headers: { ...meta.headers, ...span.headers() } } };
      const raw = raws.get(delivery);
      if (raw) raws.set(next, raw);
      deliverySpans.set(next, span);
      return next;
    };
    for (const item of items) {
      if (item.kind === 'event') {
        raws.set(item.delivery, item.raw);
        run.push(item.delivery);
        continue;
      }
      if ((await flush()) === 'aborted') return;
      if (item.kind === 'skip') {
        metrics.skipped?.inc({ topic: batch.topic, type: item.type });
      } else {
        log.warn({ source: coordinates(item.raw), code: item.code, reason: item.message }, 'invalid message skipped');
        if ((await deadLetter(item.raw, item.code, item.message, payload)) === 'aborted') return;
        metrics.processed?.inc({ topic: batch.topic, type: 'invalid', outcome: 'invalid' });
        if (tracingEnabled()) traceInvalid(item.raw, item.code);
      }
      resolve(item.raw.offset);
    }
    if ((await flush()) === 'aborted') return;
    // A transactional producer's commit marker (a control record) or an aborted record after the
    // last message: kafkajs hides them, and the group would stay one offset short of the high
    // watermark for good (lag 1, the caught-up clock and every deadline sweeper stopped).
    const last = items.at(-1);
    const end = batch.lastOffset();
    if (last !== undefined && BigInt(end) > BigInt(last.raw.offset)) resolve(end);
  }
}
