import { eventConsumer, fold, type ServiceContext } from '@labelflow/service-kit';
import type { BillingSvcConfig } from '../config';
import { decider } from './execute';
import { billingBatchStore } from './repository';
import type { BillingTaskState } from './state';

/** An approved label is what gets paid for; a cancellation or a newer attempt takes the money back. */
export const billingConsumer = eventConsumer<BillingTaskState, ServiceContext<BillingSvcConfig>>(billingBatchStore, {
  QaPassed: (event, state, ctx) => fold(decider, state, { type: 'BillTask', event, failurePrefix: ctx.config.FAULT_BILLING_FAILURE_PREFIX }),
  TaskCancelled: (event, state) => fold(decider, state, { type: 'Observe', event }, [event]),
  TaskReopened: (event, state) => fold(decider, state, { type: 'Observe', event }, [event]),
});
