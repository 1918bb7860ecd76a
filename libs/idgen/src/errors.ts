import { LabelflowError } from '@labelflow/contracts';

export const IdgenErrors = {
  /** Every worker id of the namespace is held by a live lease. */
  NO_FREE_WORKER_ID: 'IDGEN_NO_FREE_WORKER_ID',
  /** The worker-id lease is gone (taken over after expiry, released) or could not be renewed in time. */
  LEASE_LOST: 'IDGEN_LEASE_LOST',
  /** The clock went back further than the generator is willing to wait out. */
  CLOCK_MOVED_BACKWARDS: 'IDGEN_CLOCK_MOVED_BACKWARDS',
  /** The clock reads before the custom epoch or past the 41-bit timestamp range. */
  CLOCK_OUT_OF_RANGE: 'IDGEN_CLOCK_OUT_OF_RANGE',
  /** A segment scope ran past Number.MAX_SAFE_INTEGER. */
  SEGMENT_EXHAUSTED: 'IDGEN_SEGMENT_EXHAUSTED',
  /** A Snowflake id, task number, project key or scope that does not parse. */
  INVALID_ID: 'IDGEN_INVALID_ID',
  /** Options out of range (worker id, ttl, segment size, ...). */
  CONFIG_INVALID: 'IDGEN_CONFIG_INVALID',
} as const;
export type IdgenErrorCode = (typeof IdgenErrors)[keyof typeof IdgenErrors];

export class IdgenError extends LabelflowError<IdgenErrorCode> {}
