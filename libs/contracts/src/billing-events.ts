import { z } from 'zod';
import { ActorName, AnnotatorId, Money, storable } from './ids';
import { defineEvent } from './envelope';

/**
 * Why billing-svc refused to bill an approved attempt. `PAYOUT_LIMIT_EXCEEDED`: crediting the
 * annotator would take their payout balance past the largest exact amount (2^53 - 1 minor units).
 */
export const BillingFailureReason = z.enum(['INSUFFICIENT_BUDGET', 'PROJECT_NOT_FOUND', 'INJECTED_FAILURE', 'PAYOUT_LIMIT_EXCEEDED']);
export type BillingFailureReason = z.infer<typeof BillingFailureReason>;

// `approvedBy`, `refundedBy`: the person whose decision moved the money (the approving reviewer, the
// admin who cancelled), so every ledger entry traces to one. Optional: events from before they were
// recorded have none, and a refund for a superseded attempt is the system's.
export const BillingCompleted = defineEvent('BillingCompleted', 1, z.object({ annotatorId: AnnotatorId, amount: Money, approvedBy: ActorName.optional() }));
export const BillingFailed = defineEvent('BillingFailed', 1, z.object({
  annotatorId: AnnotatorId,
  reason: BillingFailureReason,
  detail: storable(z.string().max(2000)),
  approvedBy: ActorName.optional(),
}));

/** A billed attempt was undone: the debit returned to the budget and the payout reversed. */
export const BillingRefunded = defineEvent('BillingRefunded', 1, z.object({
  annotatorId: AnnotatorId,
  amount: Money,
  reason: z.enum(['TASK_CANCELLED', 'ATTEMPT_SUPERSEDED']),
  refundedBy: ActorName.optional(),
}));

export const BillingEvent = z.discriminatedUnion('type', [BillingCompleted, BillingFailed, BillingRefunded]);
export type BillingCompleted = z.infer<typeof BillingCompleted>;
export type BillingFailed = z.infer<typeof BillingFailed>;
export type BillingRefunded = z.infer<typeof BillingRefunded>;
export type BillingEvent = z.infer<typeof BillingEvent>;
