import type { Logger, Metrics } from '@labelflow/telemetry';

export interface WebhookDeps {
  readonly url: string;
  /** Tries per notice, the first included. */
  readonly attempts: number;
  readonly timeoutMs: number;
  readonly logger: Logger;
  readonly metrics?: Metrics;
  /** Backoff before the n-th retry (n from 1); 200 ms doubling to 5 s by default. */
  readonly backoffMs?: (retry: number) => number;
  readonly fetch?: typeof fetch;
}

export interface Webhook {
  /** Posts `body` as JSON in the background, retrying a failure; never throws. */
  send(body: Readonly<Record<string, unknown>>): void;
  /** Stops retrying and waits for the posts under way (each bounded by its timeout). */
  close(): Promise<void>;
}

/** Answers worth another try: the receiver was busy or broken, not the notice wrong. */
const retriable = (status: number) => status === 408 || status === 429 || status >= 500;

/**
 * Best-effort delivery of alert notices to an outside receiver (a chat hook, an incident tool):
 * bounded tries with backoff, each with a timeout. A notice that still fails is logged and counted
 * (`saga_webhook_deliveries_total{outcome="failed"}`), never retried later: the metric and the log
 * line already carry the alert.
 */
export function createWebhook(deps: WebhookDeps): Webhook {
  const post = deps.fetch ?? fetch;
  const backoff = deps.backoffMs ?? ((retry: number) => Math.min(200 * 2 ** (retry - 1), 5_000));
  const deliveries = deps.metrics?.counter('saga_webhook_deliveries_total', 'Alert notices posted to MONITOR_WEBHOOK_URL, by outcome', ['outcome']);
  const pending = new Set<Promise<void>>();
  const waits = new Set<() => void>();
  let closed = false;

  const pause = (ms: number) =>
    new Promise<void>((resolve) => {
      const wake = () => {
        clearTimeout(timer);
        waits.delete(wake);
        resolve();
      };
      const timer = setTimeout(wake, ms);
      waits.add(wake);
    });

  async function deliver(body: Readonly<Record<string, unknown>>): Promise<void> {
    let problem = '';
    for (let attempt = 1; attempt <= deps.attempts; attempt++) {
      if (attempt > 1) {
        if (closed) break;
        await pause(backoff(attempt - 1));
      }
      try {
        const response = await post(deps.url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body), signal: AbortSignal.timeout(deps.timeoutMs) });
        await response.body?.cancel();
        if (response.ok) {
          deliveries?.inc({ outcome: 'delivered' });
          return;
        }
        problem = `answered ${response.status}`;
        if (!retriable(response.status)) break;
      } catch (error) {
        problem = (error as Error).message;
      }
    }
    deliveries?.inc({ outcome: 'failed' });
    deps.logger.warn({ status: body.status, taskId: body.taskId, step: body.step, problem }, 'alert webhook not delivered');
  }

  return {
    send(body) {
      const delivery = deliver(body).finally(() => pending.delete(delivery));
      pending.add(delivery);
    },
    async close() {
      closed = true;
      for (const wake of [...waits]) wake();
      await Promise.all([...pending]);
    },
  };
}
