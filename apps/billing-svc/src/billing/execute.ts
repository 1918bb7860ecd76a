import type { TaskId } from '@labelflow/contracts';
import { execute, type PoolClient, type StateStore } from '@labelflow/service-kit';
import { billingDecider, type BillingCommand, type BillingDeciderDeps } from './decide';
import { loadBillingTask, saveBillingTask } from './repository';
import type { BillingTaskState } from './state';

// A retry pays the annotator of the failed billing, whose payout row the load locks from the billings.
const store: StateStore<BillingTaskState, TaskId> = { load: (tx, taskId) => loadBillingTask(tx, taskId, null), save: saveBillingTask };

/** Runs an admin's retry in the caller's transaction; consumed events go through reactions.ts. */
export function executeBilling(tx: PoolClient, command: Extract<BillingCommand, { type: 'RetryBilling' }>, deps: BillingDeciderDeps) {
  return execute(tx, { decider: billingDecider(deps), store }, command.taskId, command);
}
