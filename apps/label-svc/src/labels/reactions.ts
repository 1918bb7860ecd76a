import { eventConsumer, observer, preloadedStore, type ServiceContext } from '@labelflow/service-kit';
import type { LabelSvcConfig } from '../config';
import { decider } from './execute';
import { loadLabelTasksForUpdate, saveLabelTasks } from './repository';
import type { LabelTaskState } from './state';

const observe = observer(decider);

/**
 * label-svc learns assignments (their lease, their end when a task is reopened, the task's
 * cancellation) from task-svc, review outcomes and timeouts from qa-svc, and billing outcomes from
 * billing-svc; each may void the labels of an attempt (label-svc undoes its own part).
 */
export const labelConsumer = eventConsumer<LabelTaskState, ServiceContext<LabelSvcConfig>>(preloadedStore({ loadMany: loadLabelTasksForUpdate, saveMany: saveLabelTasks }), {
  TaskAssigned: observe,
  TaskReopened: observe,
  TaskCancelled: observe,
  QaPassed: observe,
  QaRejected: observe,
  QaTimedOut: observe,
  BillingFailed: observe,
  BillingCompleted: observe,
  BillingRefunded: observe,
});
