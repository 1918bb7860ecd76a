import { z } from 'zod';
import { BaseConfig } from '@labelflow/service-kit';

export const TaskSvcConfig = BaseConfig.extend({
  PORT: BaseConfig.shape.PORT.default(3001),
  /** How long a claim holds the task before it returns to the pool (default 24 h). */
  ASSIGNMENT_LEASE_MS: z.coerce.number().int().min(1).max(30 * 24 * 3600_000).default(24 * 3600_000),
  /** Extra time after the lease before reopening: labels submitted at the last moment are in flight. */
  ASSIGNMENT_LEASE_GRACE_MS: z.coerce.number().int().min(0).max(3600_000).default(30_000),
});
export type TaskSvcConfig = ReturnType<typeof TaskSvcConfig.parse>;
