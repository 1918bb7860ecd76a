import { PRELABEL_PROPOSED, type ConsumedEvent, type DomainEvent, type PrelabelProposed } from '@labelflow/contracts';
import { eventConsumer, fold, observer, preloadedStore, type EventConsumer, type EventHandler, type ServiceContext } from '@labelflow/service-kit';
import type { LabelSvcConfig } from '../config';
import { decider, written } from './execute';
import { loadLabelTasksForUpdate, saveLabelTasks } from './repository';
import type { LabelTaskState } from './state';

type Ctx = ServiceContext<LabelSvcConfig>;
const observe = observer(decider);

/**
 * A model's proposal: kept, and submitted as the model's labels when the project's policy says so
 * (decide.ts). The LabelSubmitted goes on the wire in the version this instance writes.
 */
const receivePrelabel: EventHandler<typeof PRELABEL_PROPOSED, LabelTaskState, Ctx> = (proposal: PrelabelProposed, state, ctx) => {
  const result = fold(decider, state, { type: 'ReceivePrelabel', proposal, now: ctx.now() }, [proposal]);
  return result.ok ? { ...result, events: result.events.map(written(ctx.config.LABEL_EVENT_VERSION)) } : result;
};

const consumer = eventConsumer<LabelTaskState, Ctx, DomainEvent | PrelabelProposed>(preloadedStore({ loadMany: loadLabelTasksForUpdate, saveMany: saveLabelTasks }), {
  TaskAssigned: observe,
  TaskReopened: observe,
  TaskCancelled: observe,
  QaPassed: observe,
  QaRejected: observe,
  QaTimedOut: observe,
  BillingFailed: observe,
  BillingCompleted: observe,
  BillingRefunded: observe,
  PrelabelProposed: receivePrelabel,
});

/**
 * label-svc learns assignments (their lease, their end when a task is reopened, the task's
 * cancellation) from task-svc, review outcomes and timeouts from qa-svc, and billing outcomes from
 * billing-svc; each may void the labels of an attempt (label-svc undoes its own part). Model
 * workers' proposals arrive on the prelabels input topic through the same shell and state.
 * Refused proposals are counted once their run committed (`prelabels_ignored_total{reason}`).
 */
export const labelConsumer: EventConsumer<Ctx> = {
  ...consumer,
  ignored: async (refused, ctx) => {
    const proposals = refused.filter(({ event }: { event: ConsumedEvent }) => event.type === PRELABEL_PROPOSED);
    if (proposals.length === 0) return;
    const counter = ctx.metrics.counter('prelabels_ignored_total', 'Machine pre-label proposals label-svc refused, by reason (STALE_ATTEMPT: for a superseded attempt)', ['reason']);
    for (const { code } of proposals) counter.inc({ reason: code });
  },
};
