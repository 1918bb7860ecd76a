import type { Redis } from 'ioredis';
import type { z } from 'zod';
import { consumedTopicName, consumedTopicSchema, inputTopicOf, InputTopics, isInputType, Topics, topicOf, typesOnTopicOf, type ConsumedEvent, type InputTopicKey, type TopicKey } from '@labelflow/contracts';
import { createDedupGate, inboxReader, type DedupGate } from '@labelflow/dedup';
import { createConsumerLoop, createOffsetsReader, createPublisher, defaultIsRetriable, type ConsumerLoop } from '@labelflow/messaging';
import { createOutboxRelay, type OutboxRelay } from '@labelflow/outbox';
import type { Logger, Metrics } from '@labelflow/telemetry';
import type { BaseConfig } from '../config';
import { createExactlyOnce } from '../consume';
import { isTransientDbError, type Pool } from '../db';
import { createEmitter, uuidIds, type EmitMany } from '../events';
import type { IdSource } from '../ids';
import { kafkaSecurity } from '../kafka-security';
import type { Lifecycle } from '../lifecycle';
import { createLongPollQuota } from '../prefer';
import { createTaskSignals } from '../signals';
import type { RuntimeName, ServiceContext, ServiceDefinition } from './definition';
import type { KafkaResources } from './resources';

/** What the opening steps produced, and what every wiring step draws on. */
export interface Wiring<C extends BaseConfig> {
  readonly definition: ServiceDefinition<C>;
  readonly config: C;
  readonly logger: Logger;
  readonly metrics: Metrics;
  readonly lifecycle: Lifecycle;
  readonly pool: Pool;
  readonly redis: Redis;
  readonly kafka: KafkaResources;
  readonly ids: IdSource;
}

/** The LISTEN/NOTIFY channel the relay wakes on when a transaction appends to the outbox. */
const outboxChannel = (name: RuntimeName) => `outbox_${name.replace(/-/g, '_')}`;

/** What capabilities see: ids, the clock, the outbox emitter and the task signals (listening already). */
export async function wireContext<C extends BaseConfig>(w: Wiring<C>): Promise<{ ctx: ServiceContext<C>; emitMany: EmitMany }> {
  const { definition: { name }, config, logger, metrics, pool, ids, lifecycle } = w;
  const emitter = createEmitter({ producer: name, topicPrefix: config.KAFKA_TOPIC_PREFIX, channel: outboxChannel(name), now: () => new Date(), newId: () => ids.tryNext() ?? ids.next() });
  const signals = createTaskSignals({ pool, channel: `signals_${name.replace(/-/g, '_')}`, logger: logger.child({ component: 'signals' }) });
  await signals.start();
  lifecycle.onClose('task-signals', () => signals.close());
  const ctx: ServiceContext<C> = { name, config, logger, metrics, pool, now: () => new Date(), nextId: () => ids.next(), newUuid: uuidIds, emit: emitter.emit, prepare: emitter.prepare, signals, longPolls: createLongPollQuota(config.LONG_POLLS_PER_CALLER, config.LONG_POLL_RECHECK_MS) };
  return { ctx, emitMany: emitter.emitMany };
}

/** The outbox relay with its connected producer; `listen` starts it. */
export async function wireRelay<C extends BaseConfig>(w: Wiring<C>): Promise<OutboxRelay> {
  const { config, logger, metrics, pool, lifecycle } = w;
  const publisher = createPublisher({ brokers: config.KAFKA_BROKERS, clientId: w.definition.name, ...kafkaSecurity(config) });
  await publisher.connect();
  lifecycle.onClose('producer', () => publisher.disconnect());
  const relay = createOutboxRelay({
    pool,
    publisher,
    channel: outboxChannel(w.definition.name),
    logger: logger.child({ component: 'outbox' }),
    metrics,
    pollMs: config.OUTBOX_POLL_MS,
    batchSize: config.OUTBOX_BATCH_SIZE,
    beforePublish: config.FAULT_KILL_BEFORE_PUBLISH
      ? () => {
          logger.warn('FAULT_KILL_BEFORE_PUBLISH: killing the process before publishing committed outbox rows');
          process.kill(process.pid, 'SIGKILL');
        }
      : undefined,
  });
  lifecycle.add({ name: 'outbox-relay', close: () => relay.close() });
  return relay;
}

/** The dedup gate (its Bloom filter warmed from the inbox) in front of the exactly-once shell. */
export async function wireGate<C extends BaseConfig>(w: Wiring<C>): Promise<DedupGate> {
  const { definition, config, logger, metrics, pool, redis, lifecycle } = w;
  const gate = createDedupGate({
    redis,
    inbox: inboxReader(pool),
    namespace: `lf:dedup:${config.KAFKA_TOPIC_PREFIX}:${definition.name}`,
    doneTtlMs: config.DEDUP_REDIS_TTL_MS,
    redisTimeoutMs: config.DEDUP_REDIS_TIMEOUT_MS,
    breaker: { failureThreshold: config.DEDUP_BREAKER_FAILURES, openMs: config.DEDUP_BREAKER_OPEN_MS },
    bloom: { capacity: config.DEDUP_BLOOM_CAPACITY, errorRate: config.DEDUP_BLOOM_ERROR_RATE },
    warmWindowMs: config.DEDUP_REDIS_TTL_MS,
    ...(definition.confirmDedupInInbox ? { confirmDone: () => true } : {}),
    logger,
    metrics,
  });
  lifecycle.onClose('dedup-gate', async () => gate.close());
  const warmed = await gate.warm();
  if (warmed > 0) logger.info({ keys: warmed }, 'dedup bloom filter warmed from the inbox');
  return gate;
}

export interface WiredConsumer {
  readonly consumer: ConsumerLoop;
  /** Keys of the event topics it subscribes to (`task`, `label`, …): only those carrying an event some capability consumes. */
  readonly topics: readonly TopicKey[];
  /** Keys of the input topics it subscribes to (`prelabels`): those carrying a message some capability consumes. */
  readonly inputTopics: readonly InputTopicKey[];
}

/** The consumer loop applying every capability's reactions through the exactly-once shell; `listen` starts it. */
export function wireConsumer<C extends BaseConfig>(w: Wiring<C>, ctx: ServiceContext<C>, gate: DedupGate, emitMany: EmitMany): WiredConsumer {
  const { definition, config, logger, metrics, pool, lifecycle } = w;
  const consumers = definition.capabilities.flatMap((c) => (c.consumes ? [c.consumes] : []));
  // A third of the session timeout: a run that waits on a lock that long gives up and is retried
  // with heartbeats between, long before the member could be evicted.
  const lockTimeoutMs = Math.min(10_000, Math.floor(config.KAFKA_SESSION_TIMEOUT_MS / 3));
  const processor = createExactlyOnce({ pool, gate, consumers, ctx, emitMany, onApplied: (taskIds) => ctx.signals.notification(taskIds), lockTimeoutMs });
  const types = consumers.flatMap((c) => c.types);
  const schemaOf = new Map(types.map((t) => [consumedTopicName(config.KAFKA_TOPIC_PREFIX, t), consumedTopicSchema(t)] as const));
  const typesOn = new Map(types.map((t) => [consumedTopicName(config.KAFKA_TOPIC_PREFIX, t), typesOnTopicOf(t)] as const));
  const consumedTopics = (Object.keys(Topics) as TopicKey[]).filter((k) => types.some((t) => !isInputType(t) && topicOf(t) === k));
  const inputTopics = (Object.keys(InputTopics) as InputTopicKey[]).filter((k) => types.some((t) => isInputType(t) && inputTopicOf(t) === k));
  // Registered before the consumer, so it closes after it (the lifecycle closes in reverse).
  const offsets = createOffsetsReader({ brokers: config.KAFKA_BROKERS, clientId: `${definition.name}-progress`, ...kafkaSecurity(config) });
  lifecycle.onClose('consumer-progress', () => offsets.close());
  const consumer = createConsumerLoop<ConsumedEvent>({
    kafka: w.kafka.kafka,
    groupId: `${config.KAFKA_TOPIC_PREFIX}.${definition.name}`,
    // With each topic's type list, a type header skips a message unread only when it names a type
    // of that topic and the body names none the service handles.
    bindings: [...schemaOf].map(([topic, schema]) => ({ topic, schema: schema as z.ZodType<ConsumedEvent>, types: typesOn.get(topic) ?? [] })),
    deadLetterTopic: w.kafka.deadLetterTopic,
    logger,
    metrics,
    isRetriable: (error) => defaultIsRetriable(error) || isTransientDbError(error),
    sessionTimeoutMs: config.KAFKA_SESSION_TIMEOUT_MS,
    minBytes: config.KAFKA_FETCH_MIN_BYTES,
    maxWaitTimeInMs: config.KAFKA_FETCH_MAX_WAIT_MS,
    idleWaitMs: config.KAFKA_FETCH_IDLE_WAIT_MS,
    idleAfterEmpty: config.KAFKA_FETCH_IDLE_AFTER_EMPTY,
    retry: { initialMs: config.CONSUMER_RETRY_INITIAL_MS, maxMs: config.CONSUMER_RETRY_MAX_MS, maxAttempts: config.CONSUMER_MAX_ATTEMPTS },
    offsets,
    processor,
  });
  lifecycle.add({ name: 'consumer', close: () => consumer.close() });
  return { consumer, topics: consumedTopics, inputTopics };
}
