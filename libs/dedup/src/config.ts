import { z } from 'zod';

const DAY = 24 * 3600_000;
const ms = (min: number, max: number, fallback: number) => z.coerce.number().int().min(min).max(max).default(fallback);

/** The dedup knobs as environment variables; services merge this into their config schema. */
export const DedupConfigShape = {
  /** How long Redis remembers a committed key (the fast path's replay window). */
  DEDUP_REDIS_TTL_MS: ms(60_000, 365 * DAY, 7 * DAY),
  /** Latency budget of one Redis call; slower counts as a failure for the breaker. */
  DEDUP_REDIS_TIMEOUT_MS: ms(5, 10_000, 200),
  DEDUP_BREAKER_FAILURES: z.coerce.number().int().min(1).max(1_000).default(3),
  DEDUP_BREAKER_OPEN_MS: ms(100, 600_000, 5_000),
  DEDUP_BLOOM_CAPACITY: z.coerce.number().int().min(10).max(100_000_000).default(1_000_000),
  DEDUP_BLOOM_ERROR_RATE: z.coerce.number().gt(0).lt(1).default(0.01),
  /** How long inbox rows are kept: the window in which any replay is still recognised. */
  DEDUP_INBOX_RETENTION_MS: ms(60_000, 3650 * DAY, 30 * DAY),
} as const;

/** The inbox must outlive Redis's memory of a key, or a replay between the two would be applied. */
export const dedupConfigRefinement = (c: { DEDUP_REDIS_TTL_MS: number; DEDUP_INBOX_RETENTION_MS: number }) => c.DEDUP_INBOX_RETENTION_MS > c.DEDUP_REDIS_TTL_MS;
export const dedupConfigRefinementMessage = { message: 'DEDUP_INBOX_RETENTION_MS must be longer than DEDUP_REDIS_TTL_MS', path: ['DEDUP_INBOX_RETENTION_MS'] };
