import type { PoolClient, Reaction, Reactions } from '@labelflow/service-kit';
import type { TaskSvcConfig } from '../config';
import type { ObservedEvent } from './state';
import { executeTask } from './execute';

async function observe(tx: PoolClient, event: ObservedEvent): Promise<Reaction> {
  const result = await executeTask(tx, { type: 'Observe', event });
  return result.ok ? { emit: result.events } : { ignored: `${result.reason.code}: ${result.reason.message}` };
}

/**
 * task-svc follows the saga's progress, reopens the task for rework when QA rejects it, and
 * completes it once billing is done.
 */
export const taskReactions: Reactions<TaskSvcConfig> = {
  LabelSubmitted: observe,
  QaStarted: observe,
  QaPassed: observe,
  QaRejected: observe,
  QaTimedOut: observe,
  BillingCompleted: observe,
  BillingFailed: observe,
};
