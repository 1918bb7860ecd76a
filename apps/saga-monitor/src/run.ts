import { buildService, listen, type BuildDeps, type BuiltService, type RunningService } from '@labelflow/service-kit';
import type { SagaMonitorConfig } from './config';
import { startDeadLetterFollower } from './sagas/dead-letters';
import { startNoticeDrain } from './sagas/notices';
import { createWebhook } from './sagas/webhook';
import { startWebhookRelay } from './sagas/webhook-relay';
import { sagaMonitor } from './service';

/**
 * Starts a built monitor: the service runtime (consumer, alert sweeper, HTTP), then the drain that
 * turns committed notices into metrics and log lines (queueing webhook posts), the relay that posts
 * them, and the follower of the services' dead-letter topics. A failed start closes everything.
 */
export async function runSagaMonitor(built: BuiltService<SagaMonitorConfig>): Promise<RunningService<SagaMonitorConfig>> {
  const running = await listen(built);
  const { ctx, lifecycle } = running;
  const { config, logger, metrics, pool } = ctx;
  const webhook = config.MONITOR_WEBHOOK_URL
    ? createWebhook({ url: config.MONITOR_WEBHOOK_URL, attempts: config.MONITOR_WEBHOOK_ATTEMPTS, timeoutMs: config.MONITOR_WEBHOOK_TIMEOUT_MS, logger: logger.child({ component: 'webhook' }), metrics })
    : undefined;
  try {
    startNoticeDrain({ pool, logger, metrics, queueWebhooks: webhook !== undefined, everyMs: config.MONITOR_NOTICE_POLL_MS }, lifecycle);
    if (webhook) {
      // A post holds its row for longer than all its tries can take (each a timeout, and a jittered
      // backoff of at most 7.5 s); the relay leases no more rows than the webhook posts at once.
      const leaseMs = config.MONITOR_WEBHOOK_ATTEMPTS * (config.MONITOR_WEBHOOK_TIMEOUT_MS + 8_000) + 5_000;
      startWebhookRelay({ pool, webhook, logger, everyMs: config.MONITOR_NOTICE_POLL_MS, leaseMs }, lifecycle);
    }
    await startDeadLetterFollower({ config, pool, logger, metrics, lifecycle });
  } catch (error) {
    await lifecycle.close();
    throw error;
  }
  return running;
}

export async function startSagaMonitor(config: SagaMonitorConfig, deps: BuildDeps = {}): Promise<RunningService<SagaMonitorConfig>> {
  return runSagaMonitor(await buildService(sagaMonitor, config, deps));
}
