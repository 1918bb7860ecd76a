import type { ProjectId, TaskId } from '@labelflow/contracts';
import { execute, type PoolClient } from '@labelflow/service-kit';
import { decide, type BillingCommand } from './decide';
import { loadBillingTask, saveBillingTask } from './repository';
import { evolve } from './state';

export const decider = { decide, evolve };

/**
 * Runs a billing command in the caller's transaction. Cancellations and reopenings are folded in
 * even when they refund nothing: they are the tombstones later approvals are checked against.
 */
export function executeBilling(tx: PoolClient, command: BillingCommand) {
  const taskId = command.type === 'RetryBilling' ? command.taskId : command.event.taskId;
  const projectHint = command.type === 'RetryBilling' ? null : command.event.projectId;
  // A retry pays the annotator of the failed billing, which the load adds from the billings.
  const annotators = command.type === 'BillTask' ? [command.event.payload.annotatorId] : [];
  const store = { load: () => loadBillingTask(tx, taskId as TaskId, projectHint as ProjectId | null, { annotators }), save: saveBillingTask };
  return execute(tx, { decider, store }, taskId, command, command.type === 'Observe' ? [command.event] : []);
}
