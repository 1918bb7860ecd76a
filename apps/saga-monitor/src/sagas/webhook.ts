import type { Logger, Metrics } from '@labelflow/telemetry';

export interface WebhookDeps {
  readonly url: string;
  /** Tries per notice, the first included. */
  readonly attempts: number;
  readonly timeoutMs: number;
  readonly logger: Logger;
  readonly metrics?: Metrics;
  /** Backoff before the n-th retry (n from 1); 200 ms doubling to 5 s by default, each with ±50 % jitter. */
  readonly backoffMs?: (retry: number) => number;
  /** Posts under way at once; the rest wait their turn. Default WEBHOOK_CONCURRENCY. */
  readonly concurrency?: number;
  readonly fetch?: typeof fetch;
}

/** The default of `concurrency`, and how many queued posts the relay leases at once (webhook-relay.ts). */
export const WEBHOOK_CONCURRENCY = 8;

/** How a post ended: taken, given up (its tries spent, or refused as wrong), or cut short by close. */
export type WebhookOutcome = 'delivered' | 'failed' | 'interrupted';

export interface Webhook {
  /**
   * Posts `body` as JSON, retrying a failure; never rejects. Bodies of one alert (same `taskId`,
   * `step` and `attempt`) go out one at a time in the order sent: a `resolved` never overtakes the
   * `firing` it resolves, even while that one is being retried.
   */
  send(body: Readonly<Record<string, unknown>>): Promise<WebhookOutcome>;
  /** Stops: the tries under way end (each bounded by its timeout), everything else ends `interrupted`. */
  close(): Promise<void>;
}

/** Answers worth another try: the receiver was busy or broken, not the notice wrong. */
const retriable = (status: number) => status === 408 || status === 429 || status >= 500;

/**
 * Posts alert notices to an outside receiver (a chat hook, an incident tool): bounded tries with
 * backoff, each with a timeout. A notice that still fails is logged and counted
 * (`saga_webhook_deliveries_total{outcome="failed"}`) and given up: the metric and the log line
 * already carry the alert. What is durable is the queue in front of it (webhook-relay.ts).
 */
export function createWebhook(deps: WebhookDeps): Webhook {
  const post = deps.fetch ?? fetch;
  // Jittered, so that a receiver that failed many posts at once is not hit again all at once.
  const backoff = deps.backoffMs ?? ((retry: number) => Math.min(200 * 2 ** (retry - 1), 5_000) * (0.5 + Math.random()));
  const slots = createSlots(deps.concurrency ?? WEBHOOK_CONCURRENCY);
  /** The last delivery of each alert: the next body of the same alert waits for it. */
  const chains = new Map<string, Promise<WebhookOutcome>>();
  const deliveries = deps.metrics?.counter('saga_webhook_deliveries_total', 'Alert notices posted to MONITOR_WEBHOOK_URL, by outcome', ['outcome']);
  const pending = new Set<Promise<WebhookOutcome>>();
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

  async function deliver(body: Readonly<Record<string, unknown>>): Promise<WebhookOutcome> {
    let problem = '';
    for (let attempt = 1; attempt <= deps.attempts; attempt++) {
      // Closed while it waited for its turn or between tries: left for the next start (its row stays queued).
      if (closed) return 'interrupted';
      if (attempt > 1) {
        await pause(backoff(attempt - 1));
        if (closed) return 'interrupted';
      }
      try {
        const response = await post(deps.url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body), signal: AbortSignal.timeout(deps.timeoutMs) });
        await response.body?.cancel();
        if (response.ok) {
          deliveries?.inc({ outcome: 'delivered' });
          return 'delivered';
        }
        problem = `answered ${response.status}`;
        if (!retriable(response.status)) break;
      } catch (error) {
        problem = (error as Error).message;
      }
    }
    deliveries?.inc({ outcome: 'failed' });
    deps.logger.warn({ status: body.status, taskId: body.taskId, step: body.step, problem }, 'alert webhook not delivered');
    return 'failed';
  }

  return {
    send(body) {
      if (closed) return Promise.resolve('interrupted');
      const alert = JSON.stringify([body.taskId, body.step, body.attempt]);
      const delivery = (chains.get(alert) ?? Promise.resolve<unknown>(undefined))
        .then(() => slots.run(() => deliver(body)))
        .finally(() => {
          pending.delete(delivery);
          if (chains.get(alert) === delivery) chains.delete(alert);
        });
      chains.set(alert, delivery);
      pending.add(delivery);
      return delivery;
    },
    async close() {
      closed = true;
      for (const wake of [...waits]) wake();
      await Promise.all([...pending]);
    },
  };
}

/** At most `limit` tasks run at once; the others start, in order, as those end. */
function createSlots(limit: number): { run<T>(task: () => Promise<T>): Promise<T> } {
  let running = 0;
  const queue: (() => void)[] = [];
  return {
    async run(task) {
      if (running >= limit) await new Promise<void>((resolve) => queue.push(resolve));
      else running++;
      try {
        return await task();
      } finally {
        // The slot passes straight to the next in line, or is given back.
        const next = queue.shift();
        if (next) next();
        else running--;
      }
    },
  };
}
