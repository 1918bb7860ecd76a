import { setTimeout as delay } from 'node:timers/promises';
import { z } from 'zod';
import { IdgenError, IdgenErrors } from './errors';

/** Custom epoch of every Snowflake id: 2025-01-01T00:00:00Z. */
export const SNOWFLAKE_EPOCH_MS = Date.UTC(2025, 0, 1);
export const SNOWFLAKE_TIMESTAMP_BITS = 41;
export const SNOWFLAKE_WORKER_ID_BITS = 10;
export const SNOWFLAKE_SEQUENCE_BITS = 12;
export const MAX_WORKER_ID = (1 << SNOWFLAKE_WORKER_ID_BITS) - 1; // 1023
export const MAX_SEQUENCE = (1 << SNOWFLAKE_SEQUENCE_BITS) - 1; // 4095
/** Last millisecond (after the epoch) a 41-bit timestamp can hold: about 69.7 years. */
export const MAX_TIMESTAMP_OFFSET_MS = 2 ** SNOWFLAKE_TIMESTAMP_BITS - 1;

const WORKER_SHIFT = BigInt(SNOWFLAKE_SEQUENCE_BITS);
const TIMESTAMP_SHIFT = BigInt(SNOWFLAKE_SEQUENCE_BITS + SNOWFLAKE_WORKER_ID_BITS);
const MAX_INT64 = (1n << 63n) - 1n;

/** A Snowflake id on the wire: the decimal string of a positive signed 64-bit integer (fits `bigint` columns). */
export const SnowflakeId = z
  .string()
  .regex(/^[1-9][0-9]{0,18}$/, 'must be the decimal string of a positive 64-bit integer')
  // zod runs refinements even after the regex failed: guard before BigInt().
  .refine((s) => !/^[0-9]{1,19}$/.test(s) || BigInt(s) <= MAX_INT64, 'must fit in a signed 64-bit integer')
  .brand<'SnowflakeId'>();
export type SnowflakeId = z.infer<typeof SnowflakeId>;

export interface SnowflakeParts {
  /** Wall-clock milliseconds since the Unix epoch (the custom epoch already added back). */
  readonly timestampMs: number;
  readonly workerId: number;
  readonly sequence: number;
}

/** Splits an id into its fields. Throws `IDGEN_INVALID_ID` for anything `SnowflakeId` rejects. */
export function parseSnowflake(id: string): SnowflakeParts {
  const parsed = SnowflakeId.safeParse(id);
  if (!parsed.success) {
    throw new IdgenError(IdgenErrors.INVALID_ID, `not a Snowflake id: ${JSON.stringify(id).slice(0, 64)}`, { details: parsed.error.issues });
  }
  const v = BigInt(parsed.data);
  return {
    timestampMs: Number(v >> TIMESTAMP_SHIFT) + SNOWFLAKE_EPOCH_MS,
    workerId: Number((v >> WORKER_SHIFT) & BigInt(MAX_WORKER_ID)),
    sequence: Number(v & BigInt(MAX_SEQUENCE)),
  };
}

/** Assembles an id from its fields (tests, tooling, range queries such as "ids issued after T"). */
export function composeSnowflake(parts: SnowflakeParts): SnowflakeId {
  const offset = parts.timestampMs - SNOWFLAKE_EPOCH_MS;
  if (!Number.isInteger(offset) || offset < 0 || offset > MAX_TIMESTAMP_OFFSET_MS) {
    throw new IdgenError(IdgenErrors.CLOCK_OUT_OF_RANGE, `timestamp ${parts.timestampMs} is outside the Snowflake range`);
  }
  assertWorkerId(parts.workerId);
  if (!Number.isInteger(parts.sequence) || parts.sequence < 0 || parts.sequence > MAX_SEQUENCE) {
    throw new IdgenError(IdgenErrors.CONFIG_INVALID, `sequence must be an integer in 0..${MAX_SEQUENCE}`);
  }
  const v = (BigInt(offset) << TIMESTAMP_SHIFT) | (BigInt(parts.workerId) << WORKER_SHIFT) | BigInt(parts.sequence);
  if (v === 0n) throw new IdgenError(IdgenErrors.INVALID_ID, 'the all-zero id is not a valid Snowflake id');
  return v.toString() as SnowflakeId;
}

function assertWorkerId(workerId: number): void {
  if (!Number.isInteger(workerId) || workerId < 0 || workerId > MAX_WORKER_ID) {
    throw new IdgenError(IdgenErrors.CONFIG_INVALID, `workerId must be an integer in 0..${MAX_WORKER_ID}, got ${workerId}`);
  }
}

export interface SnowflakeOptions {
  /** 0..1023, unique among live generators; take it from a `WorkerLease`. */
  readonly workerId: number;
  /** Milliseconds since the Unix epoch. Default `Date.now`. */
  readonly clock?: () => number;
  /** A backwards step up to this many ms is waited out; a larger one throws. Default 5. */
  readonly maxBackwardMs?: number;
  /** Called with the size (ms) of every backwards step seen, waited out or not. */
  readonly onClockBackward?: (ms: number) => void;
  /** How to wait. Default a timer; tests inject one that advances a fake clock. */
  readonly sleep?: (ms: number) => Promise<void>;
  /** Checked before every id; `false` refuses with `IDGEN_LEASE_LOST`. Wire `() => lease.valid`. */
  readonly isValid?: () => boolean;
  /**
   * The last millisecond (since the Unix epoch) a previous holder of this worker id issued ids in:
   * `lease.issuedUpToMs`. Ids start after it; a clock still behind it counts as a backwards step.
   */
  readonly issuedUpToMs?: number;
}

export interface Snowflake {
  readonly workerId: number;
  /** The next id: strictly greater than every id this generator returned before. */
  next(): Promise<SnowflakeId>;
  /** The next id if one can be issued right now, without waiting; undefined where `next` would wait or throw. */
  tryNext(): SnowflakeId | undefined;
  /** The millisecond (since the Unix epoch) of the last id issued, or the `issuedUpToMs` it started from; 0 if neither. */
  lastIssuedMs(): number;
}

/**
 * A time-ordered 64-bit id generator: 41 bits of ms since 2025-01-01 | 10 bits worker id | 12 bits
 * sequence. Ids of one generator strictly increase; ids of generators with distinct worker ids never
 * collide. `next()` is async so it can wait out a full millisecond or a small clock rollback rather
 * than fail; the timestamp/sequence decision itself is synchronous, so concurrent callers are safe.
 */
export function createSnowflake(options: SnowflakeOptions): Snowflake {
  const { workerId, clock = Date.now, maxBackwardMs = 5, onClockBackward, isValid } = options;
  const sleep = options.sleep ?? ((ms: number) => delay(ms));
  assertWorkerId(workerId);
  if (!Number.isInteger(maxBackwardMs) || maxBackwardMs < 0) {
    throw new IdgenError(IdgenErrors.CONFIG_INVALID, `maxBackwardMs must be a non-negative integer, got ${maxBackwardMs}`);
  }
  const workerBits = BigInt(workerId) << WORKER_SHIFT;
  const inherited = Math.floor(options.issuedUpToMs ?? 0) - SNOWFLAKE_EPOCH_MS;
  let lastMs = inherited >= 0 ? inherited : -1; // offset from the epoch of the last id issued
  // The inherited millisecond may be full: its sequence numbers were the previous holder's.
  let sequence = inherited >= 0 ? MAX_SEQUENCE : 0;

  // The decision itself, synchronous: an id, or undefined when only waiting (a full millisecond, a
  // small rollback) or an error can answer, which is next()'s to do.
  const tryNext = (): SnowflakeId | undefined => {
    if (isValid && !isValid()) return undefined;
    const now = Math.floor(clock()) - SNOWFLAKE_EPOCH_MS;
    if (!(now >= 0 && now <= MAX_TIMESTAMP_OFFSET_MS) || now < lastMs) return undefined;
    if (now === lastMs) {
      if (sequence >= MAX_SEQUENCE) return undefined;
      sequence += 1;
    } else {
      lastMs = now;
      sequence = now === 0 && workerId === 0 ? 1 : 0; // id 0 is not a valid id
    }
    return ((BigInt(now) << TIMESTAMP_SHIFT) | workerBits | BigInt(sequence)).toString() as SnowflakeId;
  };

  const next = async (): Promise<SnowflakeId> => {
    for (;;) {
      const id = tryNext();
      if (id !== undefined) return id;
      if (isValid && !isValid()) {
        throw new IdgenError(IdgenErrors.LEASE_LOST, `worker id ${workerId} is no longer leased to this process; refusing to issue ids`);
      }
      const now = Math.floor(clock()) - SNOWFLAKE_EPOCH_MS;
      if (!(now >= 0 && now <= MAX_TIMESTAMP_OFFSET_MS)) {
        throw new IdgenError(IdgenErrors.CLOCK_OUT_OF_RANGE, `clock reads ${now + SNOWFLAKE_EPOCH_MS}, outside the Snowflake range`);
      }
      if (now < lastMs) {
        const back = lastMs - now;
        onClockBackward?.(back);
        if (back > maxBackwardMs) {
          throw new IdgenError(IdgenErrors.CLOCK_MOVED_BACKWARDS, `clock moved backwards by ${back} ms (tolerance ${maxBackwardMs} ms)`, {
            retriable: false,
            details: { backwardMs: back, maxBackwardMs },
          });
        }
        await sleep(back);
        continue; // re-read: never reuse a timestamp + sequence already issued
      }
      await sleep(1); // this millisecond is full
    }
  };
  return { workerId, next, tryNext, lastIssuedMs: () => (lastMs >= 0 ? lastMs + SNOWFLAKE_EPOCH_MS : 0) };
}
