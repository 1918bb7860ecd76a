import type { FastifyInstance } from 'fastify';
import type { InputTopicKey, TopicKey } from '@labelflow/contracts';
import type { DedupGate } from '@labelflow/dedup';
import type { ConsumerLoop } from '@labelflow/messaging';
import type { OutboxRelay } from '@labelflow/outbox';
import { createLogger, createMetrics, installTracePropagation, startTracing, TelemetryError, type Logger } from '@labelflow/telemetry';
import type { BaseConfig } from '../config';
import { ServiceKitError, ServiceKitErrors } from '../errors';
import { Lifecycle } from '../lifecycle';
import type { Sweeper } from '../sweeper';
import type { Chore, ServiceContext, ServiceDefinition } from './definition';
import { leaseIds, migrateDatabase, openKafka, openPostgres, openRedis } from './resources';
import { wireConsumer, wireContext, wireGate, wireRelay, type Wiring } from './wire';
import { wireHttp } from './wire-http';

export interface BuildDeps {
  /** The service's logger; by default one at the config's `LOG_LEVEL`. */
  readonly logger?: Logger;
}

/**
 * A service with everything opened and wired but nothing running: the HTTP app answers `inject`
 * without a port, and no event is consumed, published or swept until `listen`.
 */
export interface BuiltService<C extends BaseConfig = BaseConfig> {
  /** Ready, not listening. */
  readonly app: FastifyInstance;
  readonly ctx: ServiceContext<C>;
  /** Closes everything opened so far, in reverse order; `listen` adds what it starts. */
  readonly lifecycle: Lifecycle;
  /** Not started. */
  readonly relay: OutboxRelay;
  /** Not started. */
  readonly consumer: ConsumerLoop;
  readonly gate: DedupGate;
  /** Keys of the event topics the consumer subscribes to; none for a service that consumes nothing. */
  readonly consumedTopics: readonly TopicKey[];
  /** Keys of the input topics (produced outside labelflow) the consumer subscribes to. */
  readonly consumedInputTopics: readonly InputTopicKey[];
  /** Every capability's deadlines, not started. */
  readonly sweepers: readonly Sweeper[];
  /** Every capability's housekeeping, not started. */
  readonly chores: readonly Chore[];
}

/**
 * Builds a service: its database (created and migrated), Redis, Kafka topics, id lease, then the
 * context, outbox relay, dedup gate, consumer and HTTP API wired on them. Everything opened is
 * registered with the lifecycle as it opens; a failed build closes what it had opened.
 */
export async function buildService<C extends BaseConfig>(definition: ServiceDefinition<C>, config: C, deps: BuildDeps = {}): Promise<BuiltService<C>> {
  const logger = deps.logger ?? createLogger({ service: definition.name, level: config.LOG_LEVEL });
  const lifecycle = new Lifecycle(logger);
  try {
    return await build(definition, config, logger, lifecycle);
  } catch (error) {
    await lifecycle.close();
    throw error;
  }
}

async function build<C extends BaseConfig>(definition: ServiceDefinition<C>, config: C, logger: Logger, lifecycle: Lifecycle): Promise<BuiltService<C>> {
  installTracePropagation();
  // Registered first, so it closes last: the spans of everything else's shutdown are exported too.
  const tracing = startTracingOrExplain(definition.name, logger);
  lifecycle.onClose('tracing', () => tracing.shutdown());
  const metrics = createMetrics({ service: definition.name });

  // Open: each resource registers its close as it opens.
  const pool = await openPostgres(config, logger, metrics, lifecycle);
  await migrateDatabase(pool, definition.migrations, logger);
  const redis = await openRedis(config, logger, lifecycle);
  const kafka = await openKafka(definition.name, config, logger, lifecycle);
  const ids = await leaseIds(pool, definition.name, logger, lifecycle);

  // Wire: nothing below consumes, publishes, sweeps or listens yet.
  const w: Wiring<C> = { definition, config, logger, metrics, lifecycle, pool, redis, kafka, ids };
  const { ctx, emitMany } = await wireContext(w);
  const relay = await wireRelay(w);
  const gate = await wireGate(w);
  const consumer = wireConsumer(w, ctx, gate, emitMany);
  const app = await wireHttp(w, ctx, consumer);
  const sweepers = definition.capabilities.flatMap((c) => c.sweepers?.(ctx) ?? []);
  const chores = definition.capabilities.flatMap((c) => c.chores?.(ctx) ?? []);
  return { app, ctx, lifecycle, relay, consumer: consumer.consumer, gate, consumedTopics: consumer.topics, consumedInputTopics: consumer.inputTopics, sweepers, chores };
}

/** The OTEL_* variables are configuration like any other: a bad one stops the start with CONFIG_INVALID. */
function startTracingOrExplain(service: string, logger: Logger): ReturnType<typeof startTracing> {
  try {
    return startTracing({ service, logger });
  } catch (error) {
    if (!(error instanceof TelemetryError)) throw error;
    throw new ServiceKitError(ServiceKitErrors.CONFIG_INVALID, `invalid configuration:\n  ${error.message}`, { details: error.details, cause: error });
  }
}
