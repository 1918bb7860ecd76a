import { z } from 'zod';
import { bloomSize } from './bloom';

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
  // Below one in a million the filter's size and probes per key grow for nothing a service needs.
  DEDUP_BLOOM_ERROR_RATE: z.coerce.number().min(1e-6).lt(1).default(0.01),
  /** How long inbox rows are kept: the window in which any replay is still recognised. */
  DEDUP_INBOX_RETENTION_MS: ms(60_000, 3650 * DAY, 30 * DAY),
} as const;

/** The most memory one Bloom generation may take (two are kept); more is a typo, not a need. */
export const MAX_BLOOM_BYTES = 256 * 1024 * 1024;

/** What one generation of `capacity` keys at `errorRate` takes, in bytes (the sizing of BloomFilter). */
export const bloomBytes = (capacity: number, errorRate: number): number => Math.ceil(bloomSize(capacity, errorRate).bits / 32) * 4;

/** The Bloom generation's size, checked before a service allocates it: an over-large one would fail at start naming no variable. */
export const bloomConfigProblems = (c: { DEDUP_BLOOM_CAPACITY: number; DEDUP_BLOOM_ERROR_RATE: number }): string[] => {
  const bytes = bloomBytes(c.DEDUP_BLOOM_CAPACITY, c.DEDUP_BLOOM_ERROR_RATE);
  return bytes <= MAX_BLOOM_BYTES
    ? []
    : [`DEDUP_BLOOM_CAPACITY: ${c.DEDUP_BLOOM_CAPACITY} keys at DEDUP_BLOOM_ERROR_RATE ${c.DEDUP_BLOOM_ERROR_RATE} make a Bloom generation of ${Math.round(bytes / 1048576)} MiB (two are kept); at most ${MAX_BLOOM_BYTES / 1048576} MiB`];
};

/** The inbox must outlive Redis's memory of a key, or a replay between the two would be applied. */
export const dedupConfigRefinement = (c: { DEDUP_REDIS_TTL_MS: number; DEDUP_INBOX_RETENTION_MS: number }) => c.DEDUP_INBOX_RETENTION_MS > c.DEDUP_REDIS_TTL_MS;
export const dedupConfigRefinementMessage = { message: 'DEDUP_INBOX_RETENTION_MS must be longer than DEDUP_REDIS_TTL_MS', path: ['DEDUP_INBOX_RETENTION_MS'] };
