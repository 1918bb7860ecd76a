import { eventConsumer, fold, observer, preloadedStore, type ServiceContext } from '@labelflow/service-kit';
import type { QaSvcConfig } from '../config';
import { decider, published } from './execute';
import { loadReviewsForUpdate, saveReviewsMany } from './repository';
import type { ReviewObservedEvent, ReviewTaskState } from './state';

const observeReview = observer(decider);
const observe = (event: ReviewObservedEvent, state: ReviewTaskState) => published(observeReview(event, state));

/**
 * Every labelled attempt opens one review item, due within the review SLA; reopens, cancellations
 * and billing outcomes may void or revoke reviews (qa-svc undoes its part).
 */
export const reviewConsumer = eventConsumer<ReviewTaskState, ServiceContext<QaSvcConfig>>(preloadedStore({ loadMany: loadReviewsForUpdate, saveMany: saveReviewsMany }), {
  LabelSubmitted: (event, state, ctx) => published(fold(decider, state, { type: 'OpenReview', event, now: ctx.now(), slaMs: ctx.config.QA_SLA_MS }, [event])),
  TaskReopened: observe,
  TaskCancelled: observe,
  BillingFailed: observe,
  BillingCompleted: observe,
  BillingRefunded: observe,
});
