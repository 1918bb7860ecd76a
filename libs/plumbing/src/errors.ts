import { LabelflowError } from '@labelflow/contracts';

export const PlumbingErrors = {
  /**
   * A pool connection was asked for inside a transaction body. Holding one connection while
   * waiting for a second starves the pool once enough requests do it together; this turns that
   * load-only deadlock into an immediate failure that every test sees.
   */
  NESTED_CONNECTION: 'PLUMBING_NESTED_CONNECTION',
  /** A Redis call exceeded its latency budget (retriable). Raised only when the caller maps no error of its own. */
  REDIS_TIMEOUT: 'PLUMBING_REDIS_TIMEOUT',
  /** A Redis call failed (retriable). Raised only when the caller maps no error of its own. */
  REDIS_UNAVAILABLE: 'PLUMBING_REDIS_UNAVAILABLE',
  /**
   * COMMIT was answered ROLLBACK: a statement of the transaction had failed and the body went on
   * (it caught the error). Nothing was written, so the caller must not act as if it had.
   */
  TRANSACTION_ROLLED_BACK: 'PLUMBING_TRANSACTION_ROLLED_BACK',
  /**
   * A pool connection waited for an answer that is not coming (its backend is idle or gone, or the
   * server is out of reach) and was closed (`watchStalledConnections`). Retriable, but the
   * statement's outcome is unknown (an idle backend may have committed it): the work retried on a
   * new connection must be idempotent.
   */
  CONNECTION_STALLED: 'PLUMBING_CONNECTION_STALLED',
  /** Options out of range: a lock timeout, a breaker threshold or open period, a latency budget. */
  CONFIG_INVALID: 'PLUMBING_CONFIG_INVALID',
} as const;
export type PlumbingErrorCode = (typeof PlumbingErrors)[keyof typeof PlumbingErrors];

export class PlumbingError extends LabelflowError<PlumbingErrorCode> {}

/** Throws CONFIG_INVALID unless `value` is a positive integer (milliseconds, counts). */
export function requirePositiveInteger(name: string, value: number): void {
  if (!Number.isInteger(value) || value <= 0) throw new PlumbingError(PlumbingErrors.CONFIG_INVALID, `${name} must be a positive integer, got ${value}`);
}
