import { Redis } from 'ioredis';
import { InputTopics, TopicSchemas, inputTopicName, topicName, type InputTopicKey, type TopicKey } from '@labelflow/contracts';
import { createKafka, ensureTopics, type Kafka } from '@labelflow/messaging';
import type { Logger, Metrics } from '@labelflow/telemetry';
import type { BaseConfig } from '../config';
import { createPool, ensureDatabase, type Pool } from '../db';
import { createIdSource, type IdSource } from '../ids';
import { kafkaSecurity } from '../kafka-security';
import type { Lifecycle } from '../lifecycle';
import { migrate, type Migration } from '../migrations';
import { deadLetterTopic, type RuntimeName } from './definition';

// The first steps of building a service: each opens one outside resource and registers its close
// with the lifecycle right away, so a later step that fails still closes what came before.

/** The service's own database, created if missing. */
export async function openPostgres(config: BaseConfig, logger: Logger, metrics: Metrics, lifecycle: Lifecycle): Promise<Pool> {
  await ensureDatabase(config.DATABASE_URL);
  const abandoned = metrics.counter('db_connections_abandoned_total', 'Pool connections closed because their statement had no answer and PostgreSQL said none was coming (or could not be reached)', ['state']);
  const pool = createPool(config.DATABASE_URL, {
    refuseNestedConnections: config.DB_REFUSE_NESTED_CONNECTIONS,
    stallMs: config.DB_STALL_MS,
    onStall: (stall) => {
      abandoned.inc({ state: stall.state });
      logger.warn(stall, 'database connection closed: its statement had no answer and PostgreSQL says none is coming; the work is retried on a new connection');
    },
  });
  lifecycle.onClose('postgres', () => pool.end());
  return pool;
}

/** Brings the schema up to date before anything reads or writes it. */
export async function migrateDatabase(pool: Pool, migrations: readonly Migration[], logger: Logger): Promise<void> {
  const applied = await migrate(pool, migrations, { onWait: () => logger.info('waiting for another instance to finish migrating this database (its migration lock is held)') });
  if (applied.length > 0) logger.info({ applied }, 'migrations applied');
}

/** Redis for the dedup tier, Idempotency-Key fast path and rate limits; a service starts without it. */
export async function openRedis(config: BaseConfig, logger: Logger, lifecycle: Lifecycle): Promise<Redis> {
  // Commands fail fast while Redis is away (the dedup breaker takes over); reconnects stay frequent
  // so recovery is noticed within a second.
  // keepAlive: a Redis that vanished without a reset is found dead by the kernel, then reconnected.
  const redis = new Redis(config.REDIS_URL, { lazyConnect: true, maxRetriesPerRequest: 0, enableOfflineQueue: false, keepAlive: 10_000, retryStrategy: (times) => Math.min(times * 50, 500) });
  redis.on('error', () => undefined);
  lifecycle.onClose('redis', async () => void redis.disconnect());
  await redis.connect().catch((error: Error) => logger.warn({ err: error }, 'redis not reachable at start'));
  if (redis.status === 'ready') await warnIfUnbounded(redis, logger);
  return redis;
}

/**
 * What INFO memory says of the server's bound: labelflow's keys (dedup markers for
 * DEDUP_REDIS_TTL_MS, cached responses, rate limits) all expire, but a 7-day marker per consumed
 * event outgrows any machine at saga rates. Eviction is safe for every one of them (PostgreSQL
 * holds the truth); running out of memory is safe too, but then every write fails and the
 * services fall back to PostgreSQL for good. Undefined when INFO does not say.
 */
export function redisMemoryBound(info: string): { readonly maxmemory: number; readonly policy: string; readonly evicts: boolean } | undefined {
  const field = (name: string) => new RegExp(`^${name}:(.*)$`, 'm').exec(info)?.[1]?.trim();
  const max = field('maxmemory');
  const policy = field('maxmemory_policy');
  if (max === undefined || policy === undefined || !/^\d+$/.test(max)) return undefined;
  return { maxmemory: Number(max), policy, evicts: Number(max) > 0 && policy !== 'noeviction' };
}

async function warnIfUnbounded(redis: Redis, logger: Logger): Promise<void> {
  const bound = redisMemoryBound(await redis.info('memory').catch(() => ''));
  if (!bound || bound.evicts) return;
  logger.warn(
    { maxmemory: bound.maxmemory, policy: bound.policy },
    'redis evicts nothing (maxmemory 0 or policy noeviction): dedup markers and cached responses grow with traffic until their TTL; set maxmemory with an LRU policy (infra/local/redis.sh and the compose file do)',
  );
}

export interface KafkaResources {
  readonly kafka: Kafka;
  /** Connected: `/readyz` asks it whether the cluster answers. */
  readonly admin: ReturnType<Kafka['admin']>;
  /** This service's dead-letter topic. */
  readonly deadLetterTopic: string;
}

/** The Kafka client, every event and input topic and this service's DLQ (created if missing), and an admin for readiness. */
export async function openKafka(name: RuntimeName, config: BaseConfig, logger: Logger, lifecycle: Lifecycle): Promise<KafkaResources> {
  const kafka = createKafka({ brokers: config.KAFKA_BROKERS, clientId: name, logger, ...kafkaSecurity(config) });
  const eventTopics = (Object.keys(TopicSchemas) as TopicKey[]).map((k) => topicName(config.KAFKA_TOPIC_PREFIX, k));
  // Input topics too: their outside producers may start first, and brokers do not auto-create topics.
  const allTopics = [...eventTopics, ...(Object.keys(InputTopics) as InputTopicKey[]).map((k) => inputTopicName(config.KAFKA_TOPIC_PREFIX, k))];
  const dlq = deadLetterTopic(config.KAFKA_TOPIC_PREFIX, name);
  // The brokers' retention (24 h here) would delete a dead letter before anyone looked at it. It is
  // kept as long as the inbox keeps the keys that make its replay harmless to repeat.
  await ensureTopics(kafka, [...allTopics, dlq], config.KAFKA_TOPIC_PARTITIONS, {
    replicationFactor: config.KAFKA_TOPIC_REPLICATION_FACTOR,
    configs: { [dlq]: { 'retention.ms': String(config.DEDUP_INBOX_RETENTION_MS) } },
  });
  const admin = kafka.admin();
  await admin.connect();
  lifecycle.onClose('kafka-admin', () => admin.disconnect());
  return { kafka, admin, deadLetterTopic: dlq };
}

/** A Snowflake worker id leased in the database: no two live processes issue the same ids. */
export async function leaseIds(pool: Pool, name: RuntimeName, logger: Logger, lifecycle: Lifecycle): Promise<IdSource> {
  const ids = await createIdSource({ pool, service: name, logger });
  lifecycle.onClose('id-source', () => ids.close());
  return ids;
}
