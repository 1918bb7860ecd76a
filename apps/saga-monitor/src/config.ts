import { z } from 'zod';
import { BaseConfig } from '@labelflow/service-kit';

const deadline = (ms: number) => z.coerce.number().int().min(1).max(7 * 24 * 3600_000).default(ms);
const httpUrl = z.url({ protocol: /^https?$/ });

export const SagaMonitorConfig = BaseConfig.extend({
  PORT: BaseConfig.shape.PORT.default(3005),
  /** LabelSubmitted → QaStarted: how long qa-svc may take to open the review (same task and attempt). */
  SAGA_DEADLINE_QA_STARTED_MS: deadline(5_000),
  /** QaPassed → BillingCompleted or BillingFailed: how long billing-svc may take to decide. */
  SAGA_DEADLINE_BILLING_MS: deadline(5_000),
  /** BillingCompleted → TaskCompleted: how long task-svc may take to close the task. */
  SAGA_DEADLINE_COMPLETED_MS: deadline(5_000),
  /** QaRejected or QaTimedOut → TaskReopened of the next attempt: how long task-svc may take to reopen the task. */
  SAGA_DEADLINE_REWORK_MS: deadline(5_000),
  /** BillingFailed → TaskFailed (or TaskCompleted, after a retry): how long task-svc may take to fail the task. */
  SAGA_DEADLINE_FAILURE_MS: deadline(5_000),
  /** TaskCancelled, or TaskReopened of a newer attempt → BillingRefunded of each billed attempt: how long billing-svc may take to give the money back. */
  SAGA_DEADLINE_REFUND_MS: deadline(5_000),
  /** Told of every alert raised and resolved (POST, JSON); unset: alerts are metrics and log lines only. */
  MONITOR_WEBHOOK_URL: httpUrl.optional(),
  /** Tries per webhook notice before it is given up (logged and counted). */
  MONITOR_WEBHOOK_ATTEMPTS: z.coerce.number().int().min(1).max(10).default(3),
  MONITOR_WEBHOOK_TIMEOUT_MS: z.coerce.number().int().min(100).max(60_000).default(2_000),
  /** How often committed alert changes, step latencies and outcomes become metrics, logs and webhooks. */
  MONITOR_NOTICE_POLL_MS: z.coerce.number().int().min(10).max(60_000).default(250),
  /**
   * How long an ended saga's timeline and a dead letter stay (0: forever). Keep it above the topics'
   * retention: a topic replayed after its sagas were forgotten opens them again as new timelines.
   */
  MONITOR_RETENTION_HOURS: z.coerce.number().int().min(0).max(24 * 3650).default(30 * 24),
  /** Jaeger's UI: the timeline links each event's trace id to `${JAEGER_URL}/trace/<id>`. */
  JAEGER_URL: httpUrl.optional(),
});
export type SagaMonitorConfig = ReturnType<typeof SagaMonitorConfig.parse>;
