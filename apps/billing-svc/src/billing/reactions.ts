import type { QaPassed, TaskCancelled, TaskReopened } from '@labelflow/contracts';
import type { PoolClient, Reaction, Reactions, ServiceContext } from '@labelflow/service-kit';
import type { BillingSvcConfig } from '../config';
import { executeBilling } from './execute';

const toReaction = (result: Awaited<ReturnType<typeof executeBilling>>): Reaction =>
  result.ok ? { emit: result.events } : { ignored: `${result.reason.code}: ${result.reason.message}` };

/** An approved label is what gets paid for; a cancellation or a newer attempt takes the money back. */
export const billingReactions: Reactions<BillingSvcConfig> = {
  QaPassed: async (tx: PoolClient, event: QaPassed, ctx: ServiceContext<BillingSvcConfig>) =>
    toReaction(await executeBilling(tx, { type: 'BillTask', event, failurePrefix: ctx.config.FAULT_BILLING_FAILURE_PREFIX })),
  TaskCancelled: async (tx: PoolClient, event: TaskCancelled) => toReaction(await executeBilling(tx, { type: 'Observe', event })),
  TaskReopened: async (tx: PoolClient, event: TaskReopened) => toReaction(await executeBilling(tx, { type: 'Observe', event })),
};
