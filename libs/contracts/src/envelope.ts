import { z } from 'zod';
import { Attempt, EventId, Instant, ProjectId, storable, TaskId } from './ids';

export const ServiceName = z.enum(['task-svc', 'label-svc', 'qa-svc', 'billing-svc']);
export type ServiceName = z.infer<typeof ServiceName>;

const envelopeBase = {
  id: EventId,
  taskId: TaskId,
  projectId: ProjectId,
  attempt: Attempt,
  occurredAt: Instant,
  producer: ServiceName,
  /** What caused this event: the id of the consumed event, or the HTTP Idempotency-Key. */
  causationId: storable(z.string().min(1).max(255)).optional(),
};

/**
 * Builds the schema of one event: the shared envelope plus a literal type, a literal version and
 * its payload. Every event on every topic has this shape.
 */
export function defineEvent<const T extends string, const V extends number, P extends z.ZodType>(type: T, version: V, payload: P) {
  return z.object({ ...envelopeBase, type: z.literal(type), version: z.literal(version), payload: payload.readonly() }).readonly();
}

/** The envelope alone, for code that routes or dedups without knowing the payload. */
export const EnvelopeHeader = z.object({ ...envelopeBase, type: z.string().min(1).max(100), version: z.number().int().min(1), payload: z.unknown() });
export type EnvelopeHeader = z.infer<typeof EnvelopeHeader>;
