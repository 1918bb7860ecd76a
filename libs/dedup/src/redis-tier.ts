import type { Redis } from 'ioredis';
import { createLuaScripts } from '@labelflow/plumbing';
import { DedupError, DedupErrors } from './errors';

/** What Redis knows of a key: its effect committed (done), or nothing yet (unknown). */
export const RedisVerdict = { done: 0, unknown: 1 } as const;
export type RedisVerdict = (typeof RedisVerdict)[keyof typeof RedisVerdict];

const DONE = 'done';

// One atomic pass over a whole batch of keys. A key is "done" only after its transaction committed
// (markDone). There is no lease: a key another consumer is still working on (a rebalance in flight)
// is "unknown" here, and the inbox insert in the consumer's own transaction decides, waiting on
// the other transaction's row if it must.
const CHECK = `
local out = {}
for i, key in ipairs(KEYS) do
  if redis.call('GET', key) == '${DONE}' then out[i] = ${RedisVerdict.done} else out[i] = ${RedisVerdict.unknown} end
end
return out`;

const MARK_DONE = `
for i, key in ipairs(KEYS) do
  redis.call('SET', key, '${DONE}', 'PX', ARGV[1])
end
return #KEYS`;

export interface RedisTierOptions {
  readonly redis: Redis;
  /** How long "done" is remembered (the fast path's replay window). */
  readonly doneTtlMs: number;
  /** Latency budget per call; slower answers count as failures for the breaker. */
  readonly timeoutMs: number;
  /** Called when a script had to be (re)loaded, e.g. after SCRIPT FLUSH or a Redis restart. */
  readonly onScriptLoad?: (name: string) => void;
}

export interface RedisTier {
  check(keys: readonly string[]): Promise<RedisVerdict[]>;
  markDone(keys: readonly string[]): Promise<void>;
  ping(): Promise<void>;
}

/** The Redis fast path: two scripts over a whole batch of keys, one round trip each. */
export function createRedisTier(options: RedisTierOptions): RedisTier {
  const { redis, doneTtlMs, timeoutMs } = options;
  const lua = createLuaScripts({
    redis,
    scripts: { check: CHECK, markDone: MARK_DONE },
    timeoutMs,
    ...(options.onScriptLoad ? { onScriptLoad: options.onScriptLoad } : {}),
    fail: (kind, message, cause) =>
      new DedupError(kind === 'timeout' ? DedupErrors.REDIS_TIMEOUT : DedupErrors.REDIS_UNAVAILABLE, message, { cause, retriable: true }),
  });

  return {
    async check(keys) {
      if (keys.length === 0) return [];
      const codes = (await lua.run('check', keys, [])) as number[];
      return codes.map((c) => c as RedisVerdict);
    },
    async markDone(keys) {
      if (keys.length > 0) await lua.run('markDone', keys, [doneTtlMs]);
    },
    async ping() {
      await lua.bounded('ping', redis.ping());
    },
  };
}
