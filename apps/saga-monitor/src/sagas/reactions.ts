import type { DomainEvent, EventType } from '@labelflow/contracts';
import { eventConsumer, preloadedStore, type EventConsumer, type EventHandler, type ServiceContext } from '@labelflow/service-kit';
import type { SagaMonitorConfig } from '../config';
import { observeEvent, type SagaRecord } from './record';
import { addDuplicatesDropped, loadSagasForUpdate, saveSagasMany } from './repository';
import type { StepDeadlines } from './state';
import { traceIdOf } from './timeline';

type Ctx = ServiceContext<SagaMonitorConfig>;

/** Every event type of every topic: the monitor watches the whole saga (a type added to the contracts fails to compile here until it is listed). */
const everyType: Readonly<Record<EventType, true>> = {
  TaskCreated: true,
  TaskAssigned: true,
  TaskReopened: true,
  TaskCompleted: true,
  TaskFailed: true,
  TaskCancelled: true,
  LabelSubmitted: true,
  QaStarted: true,
  QaPassed: true,
  QaRejected: true,
  QaTimedOut: true,
  BillingCompleted: true,
  BillingFailed: true,
  BillingRefunded: true,
};

export const deadlinesOf = (config: SagaMonitorConfig): StepDeadlines => ({
  qa_started: config.SAGA_DEADLINE_QA_STARTED_MS,
  billing: config.SAGA_DEADLINE_BILLING_MS,
  completion: config.SAGA_DEADLINE_COMPLETED_MS,
  rework: config.SAGA_DEADLINE_REWORK_MS,
  failure: config.SAGA_DEADLINE_FAILURE_MS,
  refund: config.SAGA_DEADLINE_REFUND_MS,
});

/**
 * When it reached its topic, if Kafka says (a producer may leave the timestamp out: -1), and never
 * after the monitor read it: a relay whose clock runs ahead would otherwise push every deadline its
 * events start as far out, and silence the watchdog.
 */
export const publishedAtOf = (ms: number, consumed: Date): string | undefined => (ms > 0 ? new Date(Math.min(ms, consumed.getTime())).toISOString() : undefined);

/** The trace an event travelled in, and when it was published, come with its delivery. */
const record: EventHandler<EventType, SagaRecord, Ctx> = (event: DomainEvent, state, ctx, delivery) => {
  const consumedAt = ctx.now();
  const publishedAt = publishedAtOf(delivery.publishedAt, consumedAt);
  const observation = { deadlines: deadlinesOf(ctx.config), consumedAt: consumedAt.toISOString(), traceId: traceIdOf(delivery.trace().traceparent) ?? null };
  return { ok: true, state: observeEvent(state, event, publishedAt === undefined ? observation : { ...observation, publishedAt }), events: [] };
};

const recorded = eventConsumer<SagaRecord, Ctx>(
  preloadedStore({ loadMany: loadSagasForUpdate, saveMany: saveSagasMany }),
  Object.fromEntries(Object.keys(everyType).map((type) => [type, record])),
);

/**
 * Every event of every topic goes into its task's timeline, through the same exactly-once shell as
 * the services (inbox, dedup tiers, one transaction per run). What the shell drops as a duplicate
 * is counted on the task afterwards.
 */
export const sagaConsumer: EventConsumer<Ctx> = {
  ...recorded,
  dropped: async (events, ctx) => {
    const counts = new Map<string, number>();
    for (const e of events) counts.set(e.taskId, (counts.get(e.taskId) ?? 0) + 1);
    try {
      await addDuplicatesDropped(ctx.pool, counts);
    } catch (error) {
      ctx.logger.warn({ err: error, tasks: counts.size }, 'duplicates dropped could not be counted on their tasks');
    }
  },
};
