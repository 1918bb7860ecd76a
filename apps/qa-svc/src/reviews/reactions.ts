import type { LabelSubmitted } from '@labelflow/contracts';
import { eventConsumer, fold, preloadedStore, type ServiceContext } from '@labelflow/service-kit';
import type { QaSvcConfig } from '../config';
import type { ReviewCommand } from './decide';
import { decider, published } from './execute';
import { loadReviewsForUpdate, saveReviewsMany } from './repository';
import type { ReviewObservedEvent, ReviewTaskState } from './state';

const run = (state: ReviewTaskState, command: ReviewCommand, event: LabelSubmitted | ReviewObservedEvent) => published(fold(decider, state, command, [event]));

/**
 * Every labelled attempt opens one review item, due within the review SLA; reopens, cancellations
 * and billing outcomes may void or revoke reviews (qa-svc undoes its part).
 */
export const reviewConsumer = eventConsumer<ReviewTaskState, ServiceContext<QaSvcConfig>>(preloadedStore({ loadMany: loadReviewsForUpdate, saveMany: saveReviewsMany }), {
  LabelSubmitted: (event, state, ctx) => run(state, { type: 'OpenReview', event, now: ctx.now(), slaMs: ctx.config.QA_SLA_MS }, event),
  TaskReopened: (event, state) => run(state, { type: 'Observe', event }, event),
  TaskCancelled: (event, state) => run(state, { type: 'Observe', event }, event),
  BillingFailed: (event, state) => run(state, { type: 'Observe', event }, event),
  BillingCompleted: (event, state) => run(state, { type: 'Observe', event }, event),
  BillingRefunded: (event, state) => run(state, { type: 'Observe', event }, event),
});
