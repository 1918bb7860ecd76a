import type { TaskId } from '@labelflow/contracts';
import type { ServiceContext, Sweeper } from '@labelflow/service-kit';
import type { TaskSvcConfig } from '../config';
import { executeTask } from './execute';
import { claimExpiredLeases } from './repository';

/** Assignments nobody finished in time go back to the pool as a new attempt. */
export const leaseSweeper = (ctx: ServiceContext<TaskSvcConfig>): Sweeper => ({
  name: 'assignment-lease',
  factsOf: (taskId) => ({ taskId }),
  claimDue: (tx, limit, now) => claimExpiredLeases(tx, limit, now, ctx.config.ASSIGNMENT_LEASE_GRACE_MS),
  fire: async (tx, taskId, now) => {
    const result = await executeTask(tx, { type: 'ExpireLease', taskId: taskId as TaskId, now, graceMs: ctx.config.ASSIGNMENT_LEASE_GRACE_MS });
    if (!result.ok) return [];
    await ctx.signals.publish(tx, [taskId]);
    return result.events;
  },
});
