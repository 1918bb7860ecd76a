import type { LabelSubmitted } from '@labelflow/contracts';
import type { PoolClient, Reaction, Reactions, ServiceContext } from '@labelflow/service-kit';
import type { QaSvcConfig } from '../config';
import { executeReview } from './execute';
import type { ReviewObservedEvent } from './state';

type Executed = Awaited<ReturnType<typeof executeReview>>;
const toReaction = (result: Executed): Reaction => (result.ok ? { emit: result.events } : { ignored: `${result.reason.code}: ${result.reason.message}` });

/** Every labelled attempt opens one review item, due within the review SLA. */
async function openReview(tx: PoolClient, event: LabelSubmitted, ctx: ServiceContext<QaSvcConfig>): Promise<Reaction> {
  return toReaction(await executeReview(tx, { type: 'OpenReview', event, now: ctx.now(), slaMs: ctx.config.QA_SLA_MS }));
}

/** Reopens, cancellations and billing outcomes may void or revoke reviews (qa-svc undoes its part). */
async function observe(tx: PoolClient, event: ReviewObservedEvent): Promise<Reaction> {
  return toReaction(await executeReview(tx, { type: 'Observe', event }));
}

export const reviewReactions: Reactions<QaSvcConfig> = {
  LabelSubmitted: openReview,
  TaskReopened: observe,
  TaskCancelled: observe,
  BillingFailed: observe,
  BillingCompleted: observe,
  BillingRefunded: observe,
};
