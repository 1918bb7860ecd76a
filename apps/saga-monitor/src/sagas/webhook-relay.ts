import type { Lifecycle, Pool } from '@labelflow/service-kit';
import type { Logger } from '@labelflow/telemetry';
import { forgetWebhooks, leaseWebhooks, releaseWebhooks, type QueuedWebhook } from './repository';
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
 * how many it leased. (The running monitor keeps its slots full instead: `startWebhookRelay`.) A crash in between leaves the rows leased: they are posted again once the
 * lease runs out, so a receiver may see a post twice (the body's `id` tells), never none.
 */
export async function relayWebhooksOnce(deps: WebhookRelayDeps): Promise<number> {
  // One row per alert at most (leaseWebhooks), so no leased row waits behind another of its alert.
  const rows = await leaseWebhooks(deps.pool, deps.batch ?? WEBHOOK_CONCURRENCY, deps.leaseMs);
  await Promise.all(rows.map((row) => postLeased(deps, row)));
  return rows.length;
}

/** Posts one leased row, then forgets it (delivered or given up) or hands it back (the close cut it short). */
async function postLeased(deps: WebhookRelayDeps, row: QueuedWebhook): Promise<void> {
  const outcome = await deps.webhook.send(row.body);
  await (outcome === 'interrupted' ? releaseWebhooks(deps.pool, [row.id]) : forgetWebhooks(deps.pool, [row.id]));
}

/**
 * Keeps the webhook's slots full until the monitor closes: leases as many queued posts as there
 * are free slots, and each post that ends frees its slot for the next one at once. A post retried
 * for half a minute holds its own slot only, not a whole batch. With nothing queued it looks again
 * every `everyMs`. Failures are logged and retried; a row whose end could not be written stays
 * leased and is posted again once its lease runs out.
 */
export function startWebhookRelay(deps: WebhookRelayDeps, lifecycle: Lifecycle): void {
  const slots = deps.batch ?? WEBHOOK_CONCURRENCY;
  const posting = new Set<Promise<void>>();
  let running = true;
  let timer: NodeJS.Timeout | undefined;
  let pumping: Promise<void> | undefined;

  const pump = async () => {
    while (running && posting.size < slots) {
      // One row per alert at most (leaseWebhooks): no leased row waits behind another of its alert.
      const rows = await leaseWebhooks(deps.pool, slots - posting.size, deps.leaseMs);
      if (rows.length === 0) return;
      for (const row of rows) {
        const done: Promise<void> = postLeased(deps, row)
          .catch((error: Error) => deps.logger.warn({ err: error, id: row.id }, 'a webhook post ended without its row being updated; it is posted again once its lease runs out'))
          .finally(() => {
            posting.delete(done);
            wake();
          });
        posting.add(done);
      }
    }
  };
  const wake = () => {
    if (!running || pumping) return;
    clearTimeout(timer);
    pumping = pump()
      .catch((error: Error) => deps.logger.warn({ err: error }, 'queued webhooks not leased; retrying'))
      .finally(() => {
        pumping = undefined;
        if (running) timer = setTimeout(wake, deps.everyMs);
      });
  };
  wake();
  lifecycle.onClose('saga-webhooks', async () => {
    running = false;
    clearTimeout(timer);
    // Cuts the posts short, so those under way end and hand their rows back.
    await deps.webhook.close();
    await pumping;
    await Promise.all(posting);
  });
}
