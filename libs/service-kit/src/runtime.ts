import type { FastifyInstance } from 'fastify';
import { Redis } from 'ioredis';
import { TopicSchemas, topicName, topicOf, type DomainEvent, type ServiceName, type TopicKey } from '@labelflow/contracts';
import { createDedupGate, inboxReader, pruneInbox, type DedupGate } from '@labelflow/dedup';
import { idempotencyPlugin, pruneIdempotencyKeys } from '@labelflow/idempotency';
import { createConsumerLoop, createKafka, createPublisher, ensureTopics, type ConsumerLoop } from '@labelflow/messaging';
import { createOutboxRelay, type OutboxRelay } from '@labelflow/outbox';
import { createLogger, createMetrics, installTracePropagation, type Logger, type Metrics } from '@labelflow/telemetry';
import type { BaseConfig } from './config';
import { createExactlyOnce, type EventConsumer } from './consume';
import { asTransactionBody, createPool, ensureDatabase, isTransientDbError, type Pool } from './db';
import { kafkaSecurity } from './kafka-security';
import { createEmitter, uuidIds, type Emit } from './events';
import { authFromConfig } from './auth';
import { createHttpApp } from './http';
import { createIdSource } from './ids';
import { Lifecycle } from './lifecycle';
import { migrate, type Migration } from './migrations';
import { createTaskSignals, type TaskSignals } from './signals';
import { startSweeper, type Sweeper } from './sweeper';

export interface ServiceContext<C extends BaseConfig = BaseConfig> {
  readonly name: ServiceName;
  readonly config: C;
  readonly logger: Logger;
  readonly metrics: Metrics;
  readonly pool: Pool;
  readonly now: () => Date;
  /** A new 64-bit time-ordered id for tasks and events (see IdSource). */
  readonly nextId: () => Promise<string>;
  /** A random UUID, for resources that are not tasks (projects). */
  readonly newUuid: () => string;
  /** Stamps drafts and appends them to the outbox inside `tx`. */
  readonly emit: Emit;
  /** Task-change signals across this service's instances: requests wait on them (Prefer: wait). */
  readonly signals: TaskSignals;
}

/** One capability of a service: how it reacts to events, its HTTP routes and its deadlines. */
export interface Capability<C extends BaseConfig = BaseConfig> {
  /** How it reacts to consumed events (see `eventConsumer`); applied by the exactly-once shell. */
  readonly consumes?: EventConsumer<ServiceContext<C>>;
  readonly routes?: (app: FastifyInstance, ctx: ServiceContext<C>) => void;
  readonly sweepers?: (ctx: ServiceContext<C>) => readonly Sweeper[];
}

export interface ServiceDefinition<C extends BaseConfig = BaseConfig> {
  readonly name: ServiceName;
  readonly migrations: readonly Migration[];
  readonly capabilities: readonly Capability<C>[];
  /**
   * Confirm Redis's "already done" against the inbox before skipping an event (one query per
   * batch): for services whose every effect moves money, so a marker planted in Redis cannot make
   * them skip a debit or a refund.
   */
  readonly confirmDedupInInbox?: boolean;
}

export interface RunningService {
  readonly lifecycle: Lifecycle;
  readonly ctx: ServiceContext;
  readonly http: FastifyInstance;
  readonly relay: OutboxRelay;
  readonly consumer: ConsumerLoop;
  readonly gate: DedupGate;
  readonly url: string;
}

export const deadLetterTopic = (prefix: string, service: ServiceName): string => `${prefix}.${service}.dlq`;

/**
 * Starts a service: database (created and migrated), Kafka topics, outbox relay, the consumer with
 * the inbox dedup shell, and the HTTP API. Everything opened is closed through the lifecycle.
 */
export async function startService<C extends BaseConfig>(definition: ServiceDefinition<C>, config: C, logger = createLogger({ service: definition.name, level: config.LOG_LEVEL })): Promise<RunningService> {
  const lifecycle = new Lifecycle(logger);
  try {
    return await start(definition, config, logger, lifecycle);
  } catch (error) {
    await lifecycle.close();
    throw error;
  }
}

async function start<C extends BaseConfig>(definition: ServiceDefinition<C>, config: C, logger: Logger, lifecycle: Lifecycle): Promise<RunningService> {
  const { name } = definition;
  installTracePropagation();
  const metrics = createMetrics({ service: name });

  await ensureDatabase(config.DATABASE_URL);
  const pool = createPool(config.DATABASE_URL);
  lifecycle.onClose('postgres', () => pool.end());
  const applied = await migrate(pool, definition.migrations);
  if (applied.length > 0) logger.info({ applied }, 'migrations applied');

  // Commands fail fast while Redis is away (the dedup breaker takes over); reconnects stay frequent
  // so recovery is noticed within a second.
  const redis = new Redis(config.REDIS_URL, { lazyConnect: true, maxRetriesPerRequest: 0, enableOfflineQueue: false, retryStrategy: (times) => Math.min(times * 50, 500) });
  redis.on('error', () => undefined);
  lifecycle.onClose('redis', async () => void redis.disconnect());
  await redis.connect().catch((error: Error) => logger.warn({ err: error }, 'redis not reachable at start'));

  const kafka = createKafka({ brokers: config.KAFKA_BROKERS, clientId: name, logger, ...kafkaSecurity(config) });
  const allTopics = (Object.keys(TopicSchemas) as TopicKey[]).map((k) => topicName(config.KAFKA_TOPIC_PREFIX, k));
  const dlq = deadLetterTopic(config.KAFKA_TOPIC_PREFIX, name);
  await ensureTopics(kafka, [...allTopics, dlq], config.KAFKA_TOPIC_PARTITIONS);
  const admin = kafka.admin();
  await admin.connect();
  lifecycle.onClose('kafka-admin', () => admin.disconnect());

  const ids = await createIdSource({ pool, service: name, logger });
  lifecycle.onClose('id-source', () => ids.close());

  const channel = `outbox_${name.replace(/-/g, '_')}`;
  const emitter = createEmitter({ producer: name, topicPrefix: config.KAFKA_TOPIC_PREFIX, channel, now: () => new Date(), newId: () => ids.next() });
  const signals = createTaskSignals({ pool, channel: `signals_${name.replace(/-/g, '_')}`, logger: logger.child({ component: 'signals' }) });
  await signals.start();
  lifecycle.onClose('task-signals', () => signals.close());
  const ctx: ServiceContext<C> = {
    name,
    config,
    logger,
    metrics,
    pool,
    now: () => new Date(),
    nextId: () => ids.next(),
    newUuid: uuidIds,
    emit: emitter.emit,
    signals,
  };

  const publisher = createPublisher(kafka);
  await publisher.connect();
  lifecycle.onClose('producer', () => publisher.disconnect());
  const relay = createOutboxRelay({
    pool,
    publisher,
    channel,
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
  relay.start();
  lifecycle.add({ name: 'outbox-relay', close: () => relay.close() });

  const gate = createDedupGate({
    redis,
    inbox: inboxReader(pool),
    namespace: `lf:dedup:${config.KAFKA_TOPIC_PREFIX}:${name}`,
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
  schedule(lifecycle, 'inbox-prune', 3600_000, async () => {
    const pruned = await pruneInbox(pool, config.DEDUP_INBOX_RETENTION_MS);
    if (pruned > 0) logger.info({ pruned }, 'old inbox rows pruned');
  }, logger);


  const consumers = definition.capabilities.flatMap((c) => (c.consumes ? [c.consumes] : []));
  const processor = createExactlyOnce({ pool, gate, consumers, ctx, emitMany: emitter.emitMany, onApplied: (tx, taskIds) => signals.publish(tx, taskIds) });
  const consumedTopics = [...new Set(consumers.flatMap((c) => c.types).map(topicOf))];
  const consumer = createConsumerLoop<DomainEvent>({
    kafka,
    groupId: `${config.KAFKA_TOPIC_PREFIX}.${name}`,
    bindings: consumedTopics.map((k) => ({ topic: topicName(config.KAFKA_TOPIC_PREFIX, k), schema: TopicSchemas[k] })),
    deadLetterTopic: dlq,
    logger,
    metrics,
    isRetriable: (error) => (error as { retriable?: boolean }).retriable === true || isTransientDbError(error),
    sessionTimeoutMs: config.KAFKA_SESSION_TIMEOUT_MS,
    retry: { initialMs: config.CONSUMER_RETRY_INITIAL_MS, maxMs: config.CONSUMER_RETRY_MAX_MS, maxAttempts: config.CONSUMER_MAX_ATTEMPTS },
    processor,
  });
  lifecycle.add({ name: 'consumer', close: () => consumer.close() });
  if (consumedTopics.length > 0) await consumer.start();
  // After the consumer: deadlines are judged only on events it has caught up with.
  const caughtUpTo = consumedTopics.length > 0 ? () => consumer.caughtUpTo() : undefined;
  for (const capability of definition.capabilities) {
    for (const sweeper of capability.sweepers?.(ctx) ?? []) {
      startSweeper(sweeper, { pool, emit: ctx.emit, logger, metrics, now: ctx.now, ...(caughtUpTo ? { caughtUpTo } : {}), everyMs: config.SWEEP_INTERVAL_MS }, lifecycle);
    }
  }

  const http = createHttpApp({
    logger,
    metrics,
    auth: authFromConfig(config, { redis, namespace: `lf:rl:${config.KAFKA_TOPIC_PREFIX}:${name}`, logger, metrics }),
    readiness: {
      postgres: () => pool.query('SELECT 1'),
      redis: () => redis.ping(),
      kafka: () => admin.describeCluster(),
      // A crashed consumer takes no events in, however well the broker answers.
      ...(consumedTopics.length > 0
        ? {
            consumer: async () => {
              const { reason } = consumer.health();
              if (reason !== undefined) throw new Error(reason);
            },
          }
        : {}),
    },
  });
  if (config.FAULT_KILL_BEFORE_REPLY) {
    // Crash tests: die after a command committed and before its caller hears about it.
    http.addHook('onSend', async (request, reply, payload) => {
      if (request.method === 'POST' && reply.statusCode < 300) {
        logger.warn('FAULT_KILL_BEFORE_REPLY: killing the process after commit, before the reply');
        process.kill(process.pid, 'SIGKILL');
      }
      return payload;
    });
  }
  await http.register(idempotencyPlugin, {
    pool,
    redis,
    namespace: `lf:idem:${config.KAFKA_TOPIC_PREFIX}:${name}`,
    ttlMs: config.IDEMPOTENCY_TTL_MS,
    transactionBody: asTransactionBody,
    redisTimeoutMs: config.DEDUP_REDIS_TIMEOUT_MS,
    // Keys are scoped by the token's subject: one person can never replay another's response.
    callerOf: (request) => request.principal.subject,
    logger,
    metrics,
  });
  schedule(lifecycle, 'idempotency-prune', 3600_000, async () => void (await pruneIdempotencyKeys(pool)), logger);
  for (const capability of definition.capabilities) capability.routes?.(http, ctx);
  const url = await http.listen({ port: config.PORT, host: config.HOST });
  // Close HTTP first: stop taking commands before the machinery behind them goes away.
  lifecycle.add({ name: 'http', close: () => http.close() });
  // Before HTTP: a request waiting for a signal (Prefer: wait) answers at once instead of holding up the shutdown.
  lifecycle.onClose('long-polls', () => signals.close());
  logger.info({ url, topics: consumedTopics }, `${name} listening`);
  return { lifecycle, ctx, http, relay, consumer, gate, url };
}

/** Runs `job` now and every `everyMs` until the service closes; a failed run is logged, not fatal. */
function schedule(lifecycle: Lifecycle, name: string, everyMs: number, job: () => Promise<void>, logger: Logger): void {
  const run = () => job().catch((error: Error) => logger.warn({ err: error, job: name }, 'scheduled job failed'));
  void run();
  const timer = setInterval(run, everyMs);
  timer.unref();
  lifecycle.onClose(name, async () => clearInterval(timer));
}
