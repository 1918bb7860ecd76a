import type { Lifecycle, Pool } from '@labelflow/service-kit';
import type { Logger, Metrics } from '@labelflow/telemetry';
import { NoticeKind, type Notice } from './record';
import { activeAlertsByStep, takeNotices } from './repository';
import { watchedSteps } from './state';

// Machine steps take milliseconds, human ones (claim, label, review) minutes to days.
const STEP_BUCKETS = [0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600, 4 * 3600, 24 * 3600, 72 * 3600];
const BATCH = 500;

export interface NoticeDrainDeps {
  readonly pool: Pool;
  readonly logger: Logger;
  readonly metrics: Metrics;
  /** Queue each alert's webhook post with its notice (MONITOR_WEBHOOK_URL set; webhook-relay.ts posts them). */
  readonly queueWebhooks: boolean;
  readonly everyMs: number;
}

/** The monitor's metrics; the gauges start at 0 for every step so a scrape always shows them. */
export function sagaMetrics(metrics: Metrics) {
  const m = {
    active: metrics.gauge('saga_alerts_active', 'Saga steps past their deadline right now, by step (every instance reports the same count: take the max)', ['step']),
    raised: metrics.counter('saga_alerts_total', 'Alerts raised: a saga step missed its deadline, by step', ['step']),
    resolved: metrics.counter('saga_alerts_resolved_total', 'Alerts resolved, by step and cause (arrived, superseded by a rework, cancelled, dismissed by an admin)', ['step', 'cause']),
    steps: metrics.histogram('saga_step_seconds', 'Time between two steps of one saga attempt (event time to event time)', ['from', 'to'], STEP_BUCKETS),
    outcomes: metrics.counter('saga_outcomes_total', 'Sagas ended, by outcome (a failed task completed by a billing retry counts both)', ['outcome']),
  };
  for (const { step } of watchedSteps) {
    m.active.set({ step }, 0);
    m.raised.inc({ step }, 0);
  }
  return m;
}

const text = (v: unknown) => (typeof v === 'string' ? v : String(v));

/** Turns committed notices into effects: metrics and a log line (the webhook post was queued as the notice was taken). */
export function applyNotice(notice: Notice, { logger, m }: { logger: Logger; m: ReturnType<typeof sagaMetrics> }): void {
  const b = notice.body;
  switch (notice.kind) {
    case NoticeKind.alert:
      m.raised.inc({ step: text(b.step) });
      logger.warn({ alert: 'saga-step-overdue', ...b }, `saga step ${text(b.step)} overdue: task ${text(b.taskId)} attempt ${text(b.attempt)}, due ${text(b.dueAt)}`);
      return;
    case NoticeKind.resolved:
      m.resolved.inc({ step: text(b.step), cause: text(b.cause) });
      logger.info({ alert: 'saga-step-overdue', ...b }, `saga step ${text(b.step)} resolved (${text(b.cause)}): task ${text(b.taskId)} attempt ${text(b.attempt)}`);
      return;
    case NoticeKind.latency:
      m.steps.observe({ from: text(b.from), to: text(b.to) }, Number(b.seconds));
      return;
    case NoticeKind.outcome:
      m.outcomes.inc({ outcome: text(b.outcome) });
      return;
    default: {
      const unhandled: never = notice.kind;
      logger.warn({ kind: unhandled }, 'unknown saga notice dropped');
    }
  }
}

/** Drains notices and refreshes the active-alert gauge from the database, once. */
export async function drainOnce(deps: NoticeDrainDeps, m: ReturnType<typeof sagaMetrics>): Promise<number> {
  let total = 0;
  for (;;) {
    const notices = await takeNotices(deps.pool, BATCH, deps.queueWebhooks);
    for (const notice of notices) applyNotice(notice, { logger: deps.logger, m });
    total += notices.length;
    if (notices.length < BATCH) break;
  }
  const active = await activeAlertsByStep(deps.pool);
  for (const { step } of watchedSteps) m.active.set({ step }, active.get(step) ?? 0);
  return total;
}

/**
 * Every `everyMs`: notices committed by the consumer and the sweeper become metrics and log lines
 * (at most once: a notice is deleted before it is applied; its webhook post is queued durably by
 * that same delete), and the gauge of alerting steps is read from the database, so it is right on
 * every instance and after a restart.
 */
export function startNoticeDrain(deps: NoticeDrainDeps, lifecycle: Lifecycle): void {
  const m = sagaMetrics(deps.metrics);
  let running = true;
  let timer: NodeJS.Timeout | undefined;
  let current: Promise<void> = Promise.resolve();
  const tick = () => {
    current = drainOnce(deps, m)
      .then(() => undefined)
      .catch((error: Error) => deps.logger.warn({ err: error }, 'saga notices not drained; retrying'))
      .finally(() => {
        if (running) timer = setTimeout(tick, deps.everyMs);
      });
  };
  tick();
  lifecycle.onClose('saga-notices', async () => {
    running = false;
    clearTimeout(timer);
    await current;
  });
}
