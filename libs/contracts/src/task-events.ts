import { z } from 'zod';
import { ActorName, AnnotatorId, Attempt, Instant, storable } from './ids';
import { defineEvent } from './envelope';

export const TaskCreated = defineEvent('TaskCreated', 1, z.object({
  title: storable(z.string().min(1).max(500)),
  dataUri: storable(z.string().min(1).max(2048)),
  /** Human-friendly number within the project, e.g. `PRJ-1042` (gaps allowed, never reused). */
  taskNumber: z.string().regex(/^[A-Z][A-Z0-9]{1,9}-[1-9][0-9]{0,15}$/).optional(),
  /** Who created it (the authenticated caller). Optional: tasks created before callers were authenticated have none. */
  createdBy: ActorName.optional(),
  /** The client's business key of a task made by a bulk import (unique within the project); absent for tasks made one `POST /tasks` at a time. */
  externalId: storable(z.string().min(1).max(256)).optional(),
}));
export const TaskAssigned = defineEvent('TaskAssigned', 1, z.object({
  annotatorId: AnnotatorId,
  /** After this instant label-svc refuses the annotator's labels and task-svc reopens the task. */
  leaseExpiresAt: Instant.optional(),
}));
export const TaskCompleted = defineEvent('TaskCompleted', 1, z.object({ annotatorId: AnnotatorId }));

export const ReopenReason = z.enum(['QA_REJECTED', 'QA_TIMED_OUT', 'LEASE_EXPIRED']);
export type ReopenReason = z.infer<typeof ReopenReason>;

/**
 * The task goes back to the pool for rework. The envelope's attempt is the NEW attempt; every
 * later step of the saga (claim, labels, review, billing) runs again under it.
 */
export const TaskReopened = defineEvent('TaskReopened', 1, z.object({
  reason: ReopenReason,
  previousAttempt: Attempt,
  previousAnnotatorId: AnnotatorId.nullable(),
}));

/** The saga ended without a result; every service undoes its part (billing failed for good). */
export const TaskFailed = defineEvent('TaskFailed', 1, z.object({
  reason: z.enum(['BILLING_FAILED']),
  detail: storable(z.string().max(2000)),
}));

/** An admin stopped the task at whatever stage it was; every service compensates its part. */
export const TaskCancelled = defineEvent('TaskCancelled', 1, z.object({
  reason: storable(z.string().min(1).max(2000)),
  cancelledBy: storable(z.string().min(1).max(128)),
  previousStatus: storable(z.string().min(1).max(50)),
}));

export const TaskEvent = z.discriminatedUnion('type', [TaskCreated, TaskAssigned, TaskReopened, TaskCompleted, TaskFailed, TaskCancelled]);
export type TaskCreated = z.infer<typeof TaskCreated>;
export type TaskAssigned = z.infer<typeof TaskAssigned>;
export type TaskCompleted = z.infer<typeof TaskCompleted>;
export type TaskReopened = z.infer<typeof TaskReopened>;
export type TaskFailed = z.infer<typeof TaskFailed>;
export type TaskCancelled = z.infer<typeof TaskCancelled>;
export type TaskEvent = z.infer<typeof TaskEvent>;
