import { LabelflowError } from '@labelflow/contracts';

export const OutboxErrors = {
  PUBLISH_FAILED: 'OUTBOX_PUBLISH_FAILED',
} as const;
export type OutboxErrorCode = (typeof OutboxErrors)[keyof typeof OutboxErrors];

export class OutboxError extends LabelflowError<OutboxErrorCode> {}
