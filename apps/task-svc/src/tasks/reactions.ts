import { eventConsumer, observer, preloadedStore, type ServiceContext } from '@labelflow/service-kit';
import type { TaskSvcConfig } from '../config';
import { decider } from './execute';
import { loadTasksForUpdate, saveTasks } from './repository';
import type { TaskState } from './state';

const observe = observer(decider);

/**
 * task-svc follows the saga's progress, reopens the task for rework when QA rejects it, and
 * completes it once billing is done. A batch's tasks are loaded with one query and saved with one.
 */
export const taskConsumer = eventConsumer<TaskState | null, ServiceContext<TaskSvcConfig>>(preloadedStore({ loadMany: loadTasksForUpdate, saveMany: saveTasks }), {
  LabelSubmitted: observe,
  QaStarted: observe,
  QaPassed: observe,
  QaRejected: observe,
  QaTimedOut: observe,
  BillingCompleted: observe,
  BillingFailed: observe,
});
