import { z } from 'zod';
import { IdgenError, IdgenErrors } from './errors';
import type { Queryable } from './types';

export interface SegmentAllocatorOptions {
  /** pg pool (or anything with `query`) on the database holding `idgen_segments`. */
  readonly pool: Queryable;
  /** Numbers claimed per database round trip. Default 100. */
  readonly segmentSize?: number;
  /** Fetch the next segment in the background once at most this fraction of the current one is left. Default 0.2. */
  readonly prefetchAt?: number;
  /** Metrics hook: a segment `[from, to]` (inclusive) was claimed; `prefetch` = fetched ahead, in the background. */
  readonly onSegmentFetched?: (scope: string, from: number, to: number, prefetch: boolean) => void;
  /** A background prefetch failed; the next `next()` that needs numbers fetches again (and throws if that fails). */
  readonly onPrefetchError?: (scope: string, err: unknown) => void;
  /**
   * Scopes kept in memory; beyond it the least recently used idle one is forgotten (the rest of its
   * segments become a gap). Bounds memory however many scopes callers name. Default 10 000.
   */
  readonly maxScopes?: number;
}

export interface SegmentAllocator {
  /** The next number of `scope` (1, 2, 3, ... with gaps after restarts). Never returns a number twice, across processes. */
  next(scope: string): Promise<number>;
}

interface Segment {
  next: number;
  readonly to: number;
}

interface ScopeState {
  current: Segment | undefined;
  /** The prefetched segment, waiting for `current` to run out. */
  buffer: Segment | undefined;
  /** The one fetch in flight for this scope, if any. */
  inflight: Promise<void> | undefined;
}

// Atomic per row: concurrent claimers serialise on the row lock, each gets its own range.
// `next_value` is the first number not yet handed out to anyone; the claim is [returned - size, returned - 1].
const CLAIM_SQL = `
INSERT INTO idgen_segments AS s (scope, next_value) VALUES ($1, 1 + $2::bigint)
ON CONFLICT (scope) DO UPDATE SET next_value = s.next_value + $2::bigint
RETURNING next_value::text AS next_value`;

const Scope = z.string().min(1).max(200);

/**
 * Leaf-segment style allocator of human-friendly sequential numbers (per-project task numbers):
 * one round trip claims `segmentSize` numbers, handed out from memory; a second segment is fetched
 * in the background when the current one runs low (double buffer), so `next()` rarely waits.
 * Numbers are never handed out twice; a process that stops leaves the rest of its segments unused
 * (gaps), which is by design.
 */
export function createSegmentAllocator(options: SegmentAllocatorOptions): SegmentAllocator {
  const { pool, segmentSize = 100, prefetchAt = 0.2, onSegmentFetched, onPrefetchError, maxScopes = 10_000 } = options;
  if (!Number.isInteger(maxScopes) || maxScopes < 1) throw new IdgenError(IdgenErrors.CONFIG_INVALID, `maxScopes must be a positive integer, got ${maxScopes}`);
  if (!Number.isInteger(segmentSize) || segmentSize < 1 || segmentSize > 1_000_000) {
    throw new IdgenError(IdgenErrors.CONFIG_INVALID, `segmentSize must be an integer in 1..1000000, got ${segmentSize}`);
  }
  if (!(prefetchAt >= 0 && prefetchAt <= 1)) {
    throw new IdgenError(IdgenErrors.CONFIG_INVALID, `prefetchAt must be in [0, 1], got ${prefetchAt}`);
  }
  const prefetchBelow = Math.floor(prefetchAt * segmentSize);
  const scopes = new Map<string, ScopeState>();

  const claim = async (scope: string): Promise<Segment> => {
    const { rows } = await pool.query<{ next_value: string }>(CLAIM_SQL, [scope, segmentSize]);
    const end = Number(rows[0]?.next_value); // exclusive
    if (!Number.isSafeInteger(end)) {
      throw new IdgenError(IdgenErrors.SEGMENT_EXHAUSTED, `scope "${scope}" is past Number.MAX_SAFE_INTEGER`, { details: { scope } });
    }
    return { next: end - segmentSize, to: end - 1 };
  };

  const fetch = (scope: string, state: ScopeState, prefetch: boolean): Promise<void> => {
    state.inflight ??= claim(scope)
      .then((segment) => {
        state.buffer = segment;
        onSegmentFetched?.(scope, segment.next, segment.to, prefetch);
      })
      .finally(() => {
        state.inflight = undefined;
      });
    return state.inflight;
  };

  /** Drops the least recently used scope with no fetch in flight (a fetching one is about to be used). */
  const forgetIdle = () => {
    for (const [name, s] of scopes) {
      if (s.inflight) continue;
      scopes.delete(name);
      return;
    }
  };

  return {
    async next(scope: string): Promise<number> {
      if (!Scope.safeParse(scope).success) throw new IdgenError(IdgenErrors.INVALID_ID, 'scope must be a string of 1-200 characters');
      let state = scopes.get(scope);
      // Re-inserted on every use: the Map's order is then least recently used first.
      if (state) scopes.delete(scope);
      state ??= { current: undefined, buffer: undefined, inflight: undefined };
      scopes.set(scope, state);
      if (scopes.size > maxScopes) forgetIdle();
      for (;;) {
        // Everything from here to `return` is synchronous: concurrent callers cannot take the same number.
        const current = state.current;
        if (current && current.next <= current.to) {
          const n = current.next++;
          if (current.to - current.next + 1 <= prefetchBelow && !state.buffer && !state.inflight) {
            fetch(scope, state, true).catch((err: unknown) => onPrefetchError?.(scope, err));
          }
          return n;
        }
        if (state.buffer) {
          state.current = state.buffer;
          state.buffer = undefined;
          continue;
        }
        // A failed background prefetch is not this caller's failure (it was reported through
        // onPrefetchError): the loop fetches for itself, and only its own fetch can fail it.
        if (state.inflight) await state.inflight.catch(() => undefined);
        else await fetch(scope, state, false);
      }
    },
  };
}

/** A project key: an upper-case letter, then 1-9 upper-case letters or digits (`PRJ`, `ML2`). */
export const ProjectKey = z.string().regex(/^[A-Z][A-Z0-9]{1,9}$/, 'must be an upper-case letter followed by 1-9 upper-case letters or digits');
export type ProjectKey = z.infer<typeof ProjectKey>;

/** `formatTaskNumber('PRJ', 1042)` → `PRJ-1042`. Throws `IDGEN_INVALID_ID` for a bad key or number. */
export function formatTaskNumber(projectKey: string, n: number): string {
  if (!ProjectKey.safeParse(projectKey).success) {
    throw new IdgenError(IdgenErrors.INVALID_ID, `invalid project key ${JSON.stringify(projectKey)}: must match ^[A-Z][A-Z0-9]{1,9}$`);
  }
  if (!Number.isSafeInteger(n) || n < 1) throw new IdgenError(IdgenErrors.INVALID_ID, `task number must be a positive safe integer, got ${n}`);
  return `${projectKey}-${n}`;
}

/** The inverse of `formatTaskNumber`. Throws `IDGEN_INVALID_ID` if `s` is not `KEY-n`. */
export function parseTaskNumber(s: string): { projectKey: string; n: number } {
  const m = /^([A-Z][A-Z0-9]{1,9})-([1-9][0-9]{0,15})$/.exec(s);
  const n = Number(m?.[2]);
  if (!m || !Number.isSafeInteger(n)) throw new IdgenError(IdgenErrors.INVALID_ID, `not a task number: ${JSON.stringify(s).slice(0, 64)}`);
  return { projectKey: m[1] as string, n };
}
