import { LabelflowError } from '@labelflow/contracts';

export const MessagingErrors = {
  DECODE_FAILED: 'MESSAGING_DECODE_FAILED',
  SCHEMA_INVALID: 'MESSAGING_SCHEMA_INVALID',
  HANDLER_FAILED: 'MESSAGING_HANDLER_FAILED',
  UNBOUND_TOPIC: 'MESSAGING_UNBOUND_TOPIC',
} as const;
export type MessagingErrorCode = (typeof MessagingErrors)[keyof typeof MessagingErrors];

export class MessagingError extends LabelflowError<MessagingErrorCode> {}
