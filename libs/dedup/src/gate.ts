import type { Redis } from 'ioredis';
import { BreakerState, createRedisGuard } from '@labelflow/plumbing';
import type { Logger, Metrics } from '@labelflow/telemetry';
import { RecentKeys } from './bloom';
import { findInInbox, type InboxReader } from './inbox';
import { formatKey, type DedupKey } from './key';
import { createRedisTier, RedisVerdict } from './redis-tier';

// Part of the gate's answer (`breakerState`), so callers need not know where the breaker lives.
export { BreakerState } from '@labelflow/plumbing';

/**
 * What a consumer should do with one message before touching its database: skip a proven
 * duplicate, or go on to its transaction, where the inbox insert is the authority.
 */
export type Verdict = { readonly kind: 'duplicate'; readonly tier: 'redis' | 'postgres' } | { readonly kind: 'proceed' };

export interface DedupGate {
  /** One round trip for a whole batch (Redis), or Bloom + one inbox query when Redis is out. */
  check(keys: readonly DedupKey[]): Promise<Verdict[]>;
  /** After the keys' transactions committed (or PostgreSQL proved them duplicates). */
  committed(keys: readonly DedupKey[]): Promise<void>;
  /** Fills the Bloom filter from recent inbox rows, so a restart does not start blind. */
  warm(): Promise<number>;
  readonly breakerState: () => BreakerState;
  /** Stops the background probe. */
  close(): void;
}

export interface DedupGateOptions {
  readonly redis: Redis;
  /** Reads the service's inbox: the authority a Bloom "maybe" is confirmed against. */
  readonly inbox: InboxReader;
  /** Per-service key namespace, e.g. `lf:dedup:labelflow:qa-svc`. */
  readonly namespace: string;
  readonly doneTtlMs: number;
  readonly redisTimeoutMs: number;
  readonly breaker: { readonly failureThreshold: number; readonly openMs: number };
  readonly bloom: { readonly capacity: number; readonly errorRate: number };
  /** How far back `warm` reads the inbox. */
  readonly warmWindowMs: number;
  readonly logger: Logger;
  readonly metrics?: Metrics;
  /** The breaker's clock (epoch ms); tests inject one. */
  readonly now?: () => number;
  /**
   * Keys whose "done" in Redis is confirmed against the inbox before the event is skipped (one
   * query per batch). For effects that move money: whoever can write Redis could otherwise make
   * the consumer skip a refund by planting a marker. Default: none, Redis is trusted.
   */
  readonly confirmDone?: (key: DedupKey) => boolean;
}

/**
 * The three tiers in front of a consumer's transaction. Redis answers first; when it errors or is
 * slow the breaker opens and the Bloom filter of recently committed keys decides, with every
 * "maybe" confirmed against the PostgreSQL inbox. Whatever this says, the inbox insert inside the
 * transaction remains the guarantee: the gate only saves work, it never drops a new event.
 */
export function createDedupGate(options: DedupGateOptions): DedupGate {
  const { redis, inbox, namespace, logger, metrics } = options;
  const log = logger.child({ component: 'dedup' });
  const bloomDecisions = metrics?.counter('dedup_bloom_decisions_total', 'Bloom fallback decisions', ['decision']);
  const tierChecks = metrics?.counter('dedup_checks_total', 'Keys checked, by the tier that answered', ['tier']);
  const redisErrors = metrics?.counter('dedup_redis_errors_total', 'Redis tier failures (errors and timeouts)', ['op']);
  const breakerGauge = metrics?.gauge('dedup_breaker_open', 'Redis breaker: 0 closed, 0.5 half-open, 1 open');
  const transitions = metrics?.counter('dedup_breaker_transitions_total', 'Redis breaker transitions', ['to']);
  const unconfirmed = metrics?.counter('dedup_redis_unconfirmed_total', 'Keys Redis called done that the inbox does not hold: processed, not skipped', []);
  const scriptLoads = metrics?.counter('dedup_script_loads_total', 'Lua scripts loaded into Redis (first use or NOSCRIPT)', ['script']);
  breakerGauge?.set(0);

  const tier = createRedisTier({
    redis,
    doneTtlMs: options.doneTtlMs,
    timeoutMs: options.redisTimeoutMs,
    onScriptLoad: (script) => scriptLoads?.inc({ script }),
  });
  // While open, Redis is pinged in the background once per open period, so the breaker closes as
  // soon as Redis answers again, whether or not messages are flowing.
  const guard = createRedisGuard({
    breaker: options.breaker,
    ...(options.now ? { now: options.now } : {}),
    probe: () => tier.ping(),
    onTransition: (from, to) => {
      transitions?.inc({ to });
      breakerGauge?.set(to === BreakerState.open ? 1 : to === BreakerState.halfOpen ? 0.5 : 0);
      log.warn({ from, to }, `redis dedup breaker ${to}`);
    },
    onFailure: (op, error) => {
      redisErrors?.inc({ op });
      log.debug({ err: error, op }, 'redis dedup call failed');
    },
  });
  const recent = new RecentKeys(options.bloom);
  const redisKey = (k: DedupKey) => `${namespace}:${formatKey(k)}`;

  async function viaBloom(keys: readonly DedupKey[]): Promise<Verdict[]> {
    tierChecks?.inc({ tier: 'bloom' }, keys.length);
    const maybe = keys.filter((k) => recent.mightContain(formatKey(k)));
    const seen = maybe.length > 0 ? await findInInbox(inbox, maybe) : new Set<string>();
    return keys.map((k) => {
      const id = formatKey(k);
      if (!recent.mightContain(id)) {
        bloomDecisions?.inc({ decision: 'definitely_new' });
        return { kind: 'proceed' };
      }
      if (seen.has(id)) {
        bloomDecisions?.inc({ decision: 'maybe_confirmed_duplicate' });
        return { kind: 'duplicate', tier: 'postgres' };
      }
      // A false positive: the filter said maybe, the inbox says no. The event is processed.
      bloomDecisions?.inc({ decision: 'maybe_false_positive' });
      return { kind: 'proceed' };
    });
  }

  return {
    async check(keys) {
      if (keys.length === 0) return [];
      const answer = await guard.call('check', () => tier.check(keys.map(redisKey)));
      if (!answer.ok) return viaBloom(keys);
      tierChecks?.inc({ tier: 'redis' }, keys.length);
      const verdicts = answer.value.map((code): Verdict => (code === RedisVerdict.done ? { kind: 'duplicate', tier: 'redis' } : { kind: 'proceed' }));
      const confirm = options.confirmDone;
      if (!confirm) return verdicts;
      const toConfirm = keys.filter((k, i) => verdicts[i]!.kind === 'duplicate' && confirm(k));
      if (toConfirm.length === 0) return verdicts;
      const held = await findInInbox(inbox, toConfirm);
      return verdicts.map((v, i) => {
        const k = keys[i]!;
        if (v.kind !== 'duplicate' || !confirm(k) || held.has(formatKey(k))) return v;
        unconfirmed?.inc();
        log.warn({ key: formatKey(k) }, 'redis says done but the inbox does not hold the key: processing it');
        return { kind: 'proceed' };
      });
    },
    // A call with no keys never reaches Redis, so it must not count as a success for the breaker:
    // an empty call after a batch of duplicates would otherwise reset its failure count each time.
    async committed(keys) {
      if (keys.length === 0) return;
      for (const k of keys) recent.add(formatKey(k));
      await guard.call('markDone', () => tier.markDone(keys.map(redisKey)));
    },
    async warm() {
      let warmed = 0;
      for await (const page of inbox.recentKeys(options.warmWindowMs, options.bloom.capacity)) {
        for (const k of page) recent.add(formatKey(k));
        warmed += page.length;
      }
      return warmed;
    },
    breakerState: guard.state,
    close: guard.close,
  };
}
