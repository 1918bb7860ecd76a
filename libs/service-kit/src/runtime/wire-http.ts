import { ServiceKitError, ServiceKitErrors } from '../errors';
import type { FastifyInstance } from 'fastify';
import { idempotencyPlugin } from '@labelflow/idempotency';
import { authFromConfig } from '../auth';
import type { BaseConfig } from '../config';
import { withEmitTrace } from '../events';
import { createHttpApp, requestTrace } from '../http';
import type { Lifecycle } from '../lifecycle';
import type { TaskSignals } from '../signals';
import type { ServiceContext } from './definition';
import type { WiredConsumer, Wiring } from './wire';

/**
 * The HTTP API, ready to answer `inject` but not listening: authentication, readiness probes, the
 * Idempotency-Key layer, then every capability's routes (which rely on `request.idempotent`).
 */
export async function wireHttp<C extends BaseConfig>(w: Wiring<C>, ctx: ServiceContext<C>, { consumer, topics }: WiredConsumer): Promise<FastifyInstance> {
  const { definition, config, logger, metrics, pool, redis, lifecycle } = w;
  const app = createHttpApp({
    logger,
    metrics,
    bodyTimeoutMs: config.HTTP_BODY_TIMEOUT_MS,
    auth: {
      ...authFromConfig(config, { redis, namespace: `lf:rl:${config.KAFKA_TOPIC_PREFIX}:${definition.name}`, logger, metrics }),
      ...(definition.publicRoutes ? { publicRoutes: ['/healthz', '/readyz', ...definition.publicRoutes] } : {}),
    },
    readinessOptional: ['redis'],
    readiness: {
      postgres: () => pool.query('SELECT 1'),
      redis: () => redis.ping(),
      kafka: () => w.kafka.admin.describeCluster(),
      // A crashed consumer takes no events in, however well the broker answers.
      ...(topics.length > 0
        ? {
            consumer: async () => {
              const { reason } = consumer.health();
              if (reason !== undefined) throw new ServiceKitError(ServiceKitErrors.DEPENDENCY_DOWN, reason, { retriable: true });
            },
          }
        : {}),
    },
  });
  if (config.FAULT_KILL_BEFORE_REPLY) {
    // Crash tests: die after a command committed and before its caller hears about it.
    app.addHook('onSend', async (request, reply, payload) => {
      if (request.method === 'POST' && reply.statusCode < 300) {
        logger.warn('FAULT_KILL_BEFORE_REPLY: killing the process after commit, before the reply');
        process.kill(process.pid, 'SIGKILL');
      }
      return payload;
    });
  }
  await app.register(idempotencyPlugin, {
    pool,
    redis,
    namespace: `lf:idem:${config.KAFKA_TOPIC_PREFIX}:${definition.name}`,
    ttlMs: config.IDEMPOTENCY_TTL_MS,
    // The command's events continue its request's trace (there is no active context per request
    // while nothing records spans).
    transactionBody: (fn, { request, tx }) => withEmitTrace(tx, requestTrace(request), fn),
    redisTimeoutMs: config.DEDUP_REDIS_TIMEOUT_MS,
    // Keys are scoped by the token's subject: one person can never replay another's response.
    callerOf: (request) => request.principal.subject,
    logger,
    metrics,
  });
  for (const capability of definition.capabilities) capability.routes?.(app, ctx);
  await app.ready();
  closeHttpFirst(lifecycle, app, ctx.signals);
  return app;
}

/**
 * Registers HTTP's close to run before everything registered so far. `buildService` calls it so a
 * service that never listens still closes its app; `listen` calls it again once the consumer and
 * sweepers are running, so HTTP still closes first (a second close of either is a no-op).
 */
export function closeHttpFirst(lifecycle: Lifecycle, app: FastifyInstance, signals: TaskSignals): void {
  // Close HTTP first: stop taking commands before the machinery behind them goes away.
  lifecycle.add({ name: 'http', close: () => app.close() });
  // Before HTTP: a request waiting for a signal (Prefer: wait) answers at once instead of holding up the shutdown.
  lifecycle.onClose('long-polls', () => signals.close());
}
