import type { Lifecycle, Pool } from '@labelflow/service-kit';
import type { Logger } from '@labelflow/telemetry';
import { forgetWebhooks, leaseWebhooks, releaseWebhooks } from './repository';
import { WEBHOOK_CONCURRENCY, type Webhook } from './webhook';

export interface WebhookRelayDeps {
  readonly pool: Pool;
  readonly webhook: Webhook;
  readonly logger: Logger;
  readonly everyMs: number;
  /** How long one post may hold its row: longer than all its tries and backoffs. */
  readonly leaseMs: number;
  /**
   * Rows leased at once: no more than the webhook posts at once (its `concurrency`, default
   * WEBHOOK_CONCURRENCY). A row leased beyond them would wait for a slot with its lease running,
   * and once the lease ran out another instance would post it too.
   */
  readonly batch?: number;
}

/**
 * Posts the queued webhooks once: leases a batch, posts each (one alert's in order, see Webhook),
 * then forgets the ones delivered or given up and hands back those the close cut short. Returns
 * how many it leased. A crash in between leaves the rows leased: they are posted again once the
 * lease runs out, so a receiver may see a post twice (the body's `id` tells), never none.
 */
export async function relayWebhooksOnce(deps: WebhookRelayDeps): Promise<number> {
  // One row per alert at most (leaseWebhooks), so no leased row waits behind another of its alert.
  const rows = await leaseWebhooks(deps.pool, deps.batch ?? WEBHOOK_CONCURRENCY, deps.leaseMs);
  if (rows.length === 0) return 0;
  const outcomes = await Promise.all(rows.map(async (row) => ({ id: row.id, outcome: await deps.webhook.send(row.body) })));
  await forgetWebhooks(deps.pool, outcomes.filter((o) => o.outcome !== 'interrupted').map((o) => o.id));
  await releaseWebhooks(deps.pool, outcomes.filter((o) => o.outcome === 'interrupted').map((o) => o.id));
  return rows.length;
}

/** Every `everyMs` (at once while batches come back full) until the monitor closes; failures are logged and retried. */
export function startWebhookRelay(deps: WebhookRelayDeps, lifecycle: Lifecycle): void {
  let running = true;
  let timer: NodeJS.Timeout | undefined;
  let current: Promise<void> = Promise.resolve();
  const tick = () => {
    current = relayWebhooksOnce(deps)
      .then((leased) => (leased === (deps.batch ?? WEBHOOK_CONCURRENCY) ? 0 : deps.everyMs))
      .catch((error: Error) => {
        deps.logger.warn({ err: error }, 'queued webhooks not posted; retrying');
        return deps.everyMs;
      })
      .then((wait) => {
        if (running) timer = setTimeout(tick, wait);
      });
  };
  tick();
  lifecycle.onClose('saga-webhooks', async () => {
    running = false;
    clearTimeout(timer);
    // Cuts the posts short, so the batch under way ends and hands its rows back.
    await deps.webhook.close();
    await current;
  });
}
