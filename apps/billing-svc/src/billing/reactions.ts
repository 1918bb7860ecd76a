import { eventConsumer, fold, observer, type ServiceContext } from '@labelflow/service-kit';
import type { BillingSvcConfig } from '../config';
import { billingDecider } from './decide';
import { faultsOf } from './faults';
import { billingBatchStore } from './repository';
import type { BillingTaskState } from './state';

type BillingContext = ServiceContext<BillingSvcConfig>;

/** Billing decides with the faults this service's configuration injects (none outside tests and load runs). */
const deciderFor = (ctx: BillingContext) => billingDecider({ faults: faultsOf(ctx.config) });

/**
 * An approved label is what gets paid for; a cancellation or a newer attempt takes the money back.
 * Both are folded in even when they refund nothing: they are the tombstones later approvals are
 * checked against.
 */
export const billingConsumer = eventConsumer<BillingTaskState, BillingContext>(billingBatchStore, {
  QaPassed: (event, state, ctx) => fold(deciderFor(ctx), state, { type: 'BillTask', event }),
  TaskCancelled: (event, state, ctx) => observer(deciderFor(ctx))(event, state),
  TaskReopened: (event, state, ctx) => observer(deciderFor(ctx))(event, state),
});
