import { BreakerState, CircuitBreaker } from './breaker';

/** What a guarded call gave: the value, or nothing because the breaker was open or the call failed. */
export type GuardedAnswer<T> = { readonly ok: true; readonly value: T } | { readonly ok: false; readonly reason: 'open' | 'failed' };

export interface RedisGuardOptions {
  readonly breaker: { readonly failureThreshold: number; readonly openMs: number };
  /** The breaker's clock (epoch ms); tests inject one. */
  readonly now?: () => number;
  /**
   * A cheap bounded call (a PING) made in the background once per open period while the breaker
   * is open, so it closes as soon as Redis answers again, whether or not callers are calling.
   * Without it the breaker closes on the first caller's half-open probe.
   */
  readonly probe?: () => Promise<unknown>;
  readonly onTransition?: (from: BreakerState, to: BreakerState) => void;
  /** A call (or a background probe, op `probe`) threw; it was counted against the breaker. */
  readonly onFailure?: (op: string, error: unknown) => void;
  /** A call was not made because the breaker is open. */
  readonly onSkip?: (op: string) => void;
}

export interface RedisGuard {
  /**
   * Makes `work` unless the breaker is open, and never throws: a failure is counted and answered
   * as `{ ok: false }` so the caller takes its fallback. `work` must bound itself (see
   * `createLuaScripts`, `boundedRedisCall`): a call that hangs would hold its caller, not fail.
   */
  call<T>(op: string, work: () => Promise<T>): Promise<GuardedAnswer<T>>;
  readonly state: () => BreakerState;
  /** Stops the background probe. */
  close(): void;
}

/**
 * Redis behind a circuit breaker: each call either answers or is skipped, failures open the breaker
 * after `failureThreshold` in a row, and while open calls skip Redis without paying a timeout each.
 * Redis is never the authority for whoever uses this: the fallback must give the same guarantees.
 */
export function createRedisGuard(options: RedisGuardOptions): RedisGuard {
  let probeTimer: NodeJS.Timeout | undefined;
  let closed = false;
  const breaker = new CircuitBreaker({
    ...options.breaker,
    ...(options.now ? { now: options.now } : {}),
    onTransition: (from, to) => {
      options.onTransition?.(from, to);
      if (to === BreakerState.open) scheduleProbe();
    },
  });

  // The probe re-arms itself until the breaker is closed: its timer runs on another clock than the
  // breaker's and may fire a little before the open period is over, when the breaker still refuses.
  function scheduleProbe(): void {
    const probe = options.probe;
    if (closed || !probe) return;
    clearTimeout(probeTimer);
    probeTimer = setTimeout(() => {
      void call('probe', probe).then(() => {
        if (breaker.current !== BreakerState.closed) scheduleProbe();
      });
    }, options.breaker.openMs);
    probeTimer.unref();
  }

  async function call<T>(op: string, work: () => Promise<T>): Promise<GuardedAnswer<T>> {
    if (!breaker.allow()) {
      options.onSkip?.(op);
      return { ok: false, reason: 'open' };
    }
    try {
      const value = await work();
      breaker.success();
      return { ok: true, value };
    } catch (error) {
      breaker.failure();
      options.onFailure?.(op, error);
      return { ok: false, reason: 'failed' };
    }
  }

  return {
    call,
    state: () => breaker.current,
    close: () => {
      closed = true;
      clearTimeout(probeTimer);
    },
  };
}
