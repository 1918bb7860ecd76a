import { LabelflowError } from '@labelflow/contracts';

/**
 * Codes of the idempotency layer. The first four are answered to HTTP clients (as
 * `application/problem+json`, see README); the others are internal (logs, fallbacks, config).
 */
export const IdempotencyErrors = {
  /** 400: the route requires an `Idempotency-Key` header and none was sent. */
  KEY_REQUIRED: 'IDEMPOTENCY_KEY_REQUIRED',
  /** 400: the header is empty, longer than 255 characters, or uses characters outside the charset. */
  KEY_INVALID: 'IDEMPOTENCY_KEY_INVALID',
  /** 409: a request with this key is still being processed. */
  KEY_IN_FLIGHT: 'IDEMPOTENCY_KEY_IN_FLIGHT',
  /** 422: the key was already used for a different request (method, route, params, query or body). */
  KEY_REUSED: 'IDEMPOTENCY_KEY_REUSED',
  REDIS_UNAVAILABLE: 'IDEMPOTENCY_REDIS_UNAVAILABLE',
  REDIS_TIMEOUT: 'IDEMPOTENCY_REDIS_TIMEOUT',
  CONFIG_INVALID: 'IDEMPOTENCY_CONFIG_INVALID',
  /** A key's record kept appearing and expiring under the claim three times over: retriable. */
  STORE_CONTENDED: 'IDEMPOTENCY_STORE_CONTENDED',
} as const;
export type IdempotencyErrorCode = (typeof IdempotencyErrors)[keyof typeof IdempotencyErrors];

export class IdempotencyError extends LabelflowError<IdempotencyErrorCode> {}
