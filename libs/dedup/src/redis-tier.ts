import type { Redis } from 'ioredis';
import { DedupError, DedupErrors } from './errors';
import { createLuaScripts } from './lua';

/** What Redis knows of a key: the effect is done, this owner now holds its lease, or another does. */
export const RedisVerdict = { done: 0, claimed: 1, busy: 2 } as const;
export type RedisVerdict = (typeof RedisVerdict)[keyof typeof RedisVerdict];

const DONE = 'done';

// One atomic pass over a whole batch of keys. A key is "done" only after its transaction committed
// (markDone); a lease is the owner's id with a short TTL, so a crashed consumer's lease expires and
// an owner retrying its own message re-claims it.
const CLAIM = `
local out = {}
for i, key in ipairs(KEYS) do
  local v = redis.call('GET', key)
  if v == '${DONE}' then
    out[i] = ${RedisVerdict.done}
  elseif (not v) or v == ARGV[1] then
    redis.call('SET', key, ARGV[1], 'PX', ARGV[2])
    out[i] = ${RedisVerdict.claimed}
  else
    out[i] = ${RedisVerdict.busy}
  end
end
return out`;

const MARK_DONE = `
for i, key in ipairs(KEYS) do
  redis.call('SET', key, '${DONE}', 'PX', ARGV[1])
end
return #KEYS`;

// Only the owner's own lease is released: never another consumer's, never a done marker.
const RELEASE = `
local n = 0
for i, key in ipairs(KEYS) do
  if redis.call('GET', key) == ARGV[1] then
    redis.call('DEL', key)
    n = n + 1
  end
end
return n`;

export interface RedisTierOptions {
  readonly redis: Redis;
  /** Lease owner: unique per consumer instance. */
  readonly owner: string;
  readonly leaseMs: number;
  /** How long "done" is remembered (the fast path's replay window). */
  readonly doneTtlMs: number;
  /** Latency budget per call; slower answers count as failures for the breaker. */
  readonly timeoutMs: number;
  /** Called when a script had to be (re)loaded, e.g. after SCRIPT FLUSH or a Redis restart. */
  readonly onScriptLoad?: (name: string) => void;
}

export interface RedisTier {
  claim(keys: readonly string[]): Promise<RedisVerdict[]>;
  markDone(keys: readonly string[]): Promise<void>;
  release(keys: readonly string[]): Promise<void>;
  ping(): Promise<void>;
}

/** The Redis fast path: three scripts over a whole batch of keys, one round trip each. */
export function createRedisTier(options: RedisTierOptions): RedisTier {
  const { redis, owner, leaseMs, doneTtlMs, timeoutMs } = options;
  const lua = createLuaScripts({
    redis,
    scripts: { claim: CLAIM, markDone: MARK_DONE, release: RELEASE },
    timeoutMs,
    ...(options.onScriptLoad ? { onScriptLoad: options.onScriptLoad } : {}),
    fail: (kind, message, cause) =>
      new DedupError(kind === 'timeout' ? DedupErrors.REDIS_TIMEOUT : DedupErrors.REDIS_UNAVAILABLE, message, { cause, retriable: true }),
  });

  return {
    async claim(keys) {
      if (keys.length === 0) return [];
      const codes = (await lua.run('claim', keys, [owner, leaseMs])) as number[];
      return codes.map((c) => c as RedisVerdict);
    },
    async markDone(keys) {
      if (keys.length > 0) await lua.run('markDone', keys, [doneTtlMs]);
    },
    async release(keys) {
      if (keys.length > 0) await lua.run('release', keys, [owner]);
    },
    async ping() {
      await lua.bounded('ping', redis.ping());
    },
  };
}
