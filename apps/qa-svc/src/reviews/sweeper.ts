import type { TaskId } from '@labelflow/contracts';
import type { ServiceContext, Sweeper } from '@labelflow/service-kit';
import type { QaSvcConfig } from '../config';
import { executeReview } from './execute';
import { claimDueReviews } from './repository';

/**
 * The review SLA as a durable deadline: a pending review's deadline_at is just a row until the
 * sweeper finds it due, then QaTimedOut is decided, the review becomes timed_out and the event
 * enters the outbox, all in the sweep's transaction.
 *
 * Exactly once across instances: `claimDue` locks the task's row FOR UPDATE SKIP LOCKED, so a second
 * instance sweeping at the same moment skips the task instead of waiting for it; once the first
 * commits, the review is timed_out and no longer matches the claim. Should a second claim still get
 * through (it read the row before the first committed), `fire` re-loads the state under the lock and
 * the pure decision finds the review no longer pending, so it emits nothing.
 */
export function reviewDeadlineSweeper(ctx: ServiceContext<QaSvcConfig>): Sweeper {
  return {
    name: 'qa-deadline',
    factsOf: (taskId) => ({ taskId }),
    claimDue: (tx, limit, now) => claimDueReviews(tx, limit, now),
    fire: async (tx, key, now) => {
      const result = await executeReview(tx, { type: 'TimeOutReview', taskId: key as TaskId, now });
      if (result.ok) return result.events;
      ctx.logger.debug({ taskId: key, reason: result.reason }, 'review deadline no longer due');
      return [];
    },
  };
}
