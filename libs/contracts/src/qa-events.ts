import { z } from 'zod';
import { AnnotatorId, Instant, ReviewerId, storable } from './ids';
import { defineEvent } from './envelope';

export const QaStarted = defineEvent('QaStarted', 1, z.object({ annotatorId: AnnotatorId }));
export const QaPassed = defineEvent('QaPassed', 1, z.object({ annotatorId: AnnotatorId, reviewerId: ReviewerId }));
export const QaRejected = defineEvent('QaRejected', 1, z.object({
  annotatorId: AnnotatorId,
  reviewerId: ReviewerId,
  reason: storable(z.string().min(1).max(2000)),
}));

/** The review's SLA passed without a decision: the attempt is abandoned and the task reworked. */
export const QaTimedOut = defineEvent('QaTimedOut', 1, z.object({
  annotatorId: AnnotatorId,
  deadlineAt: Instant,
}));

export const QaEvent = z.discriminatedUnion('type', [QaStarted, QaPassed, QaRejected, QaTimedOut]);
export type QaStarted = z.infer<typeof QaStarted>;
export type QaPassed = z.infer<typeof QaPassed>;
export type QaRejected = z.infer<typeof QaRejected>;
export type QaTimedOut = z.infer<typeof QaTimedOut>;
export type QaEvent = z.infer<typeof QaEvent>;
