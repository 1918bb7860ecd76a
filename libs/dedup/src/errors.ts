import { LabelflowError } from '@labelflow/contracts';

export const DedupErrors = {
  REDIS_UNAVAILABLE: 'DEDUP_REDIS_UNAVAILABLE',
  REDIS_TIMEOUT: 'DEDUP_REDIS_TIMEOUT',
  INBOX_UNAVAILABLE: 'DEDUP_INBOX_UNAVAILABLE',
  CONFIG_INVALID: 'DEDUP_CONFIG_INVALID',
} as const;
export type DedupErrorCode = (typeof DedupErrors)[keyof typeof DedupErrors];

export class DedupError extends LabelflowError<DedupErrorCode> {}
