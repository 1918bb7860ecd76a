import { LabelflowError } from '@labelflow/contracts';

export const OutboxErrors = {
  PUBLISH_FAILED: 'OUTBOX_PUBLISH_FAILED',
  /** A message the outbox cannot store as given (a plain field holding the row framing's separators), or a bundle frame the relay cannot read. */
  ROW_INVALID: 'OUTBOX_ROW_INVALID',
  /** The outbox table lacks a migration step the relay needs (outboxPendingMigrationSql); the relay retries until it is applied. */
  SCHEMA_OUTDATED: 'OUTBOX_SCHEMA_OUTDATED',
} as const;
export type OutboxErrorCode = (typeof OutboxErrors)[keyof typeof OutboxErrors];

export class OutboxError extends LabelflowError<OutboxErrorCode> {}
