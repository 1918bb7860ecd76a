import type { PoolClient, Reaction, Reactions } from '@labelflow/service-kit';
import type { LabelSvcConfig } from '../config';
import { executeLabel } from './execute';
import type { LabelObservedEvent } from './state';

async function observe(tx: PoolClient, event: LabelObservedEvent): Promise<Reaction> {
  const result = await executeLabel(tx, { type: 'Observe', event });
  return result.ok ? { emit: result.events } : { ignored: `${result.reason.code}: ${result.reason.message}` };
}

/**
 * label-svc learns assignments (their lease, their end when a task is reopened, the task's
 * cancellation) from task-svc, review outcomes and timeouts from qa-svc, and billing outcomes from
 * billing-svc; each may void the labels of an attempt (label-svc undoes its own part).
 */
export const labelReactions: Reactions<LabelSvcConfig> = {
  TaskAssigned: observe,
  TaskReopened: observe,
  TaskCancelled: observe,
  QaPassed: observe,
  QaRejected: observe,
  QaTimedOut: observe,
  BillingFailed: observe,
  BillingCompleted: observe,
  BillingRefunded: observe,
};
