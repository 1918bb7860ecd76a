import { requirePositiveInteger } from './errors';

export const BreakerState = { closed: 'closed', open: 'open', halfOpen: 'half_open' } as const;
export type BreakerState = (typeof BreakerState)[keyof typeof BreakerState];

export interface BreakerOptions {
  /** Consecutive failures (errors or calls over the latency budget) that open the breaker. */
  readonly failureThreshold: number;
  /** How long it stays open before one probe call is let through (half-open). */
  readonly openMs: number;
  readonly now?: () => number;
  readonly onTransition?: (from: BreakerState, to: BreakerState) => void;
}

/**
 * A circuit breaker in front of a dependency that may fail or stall (Redis): while open, callers
 * skip it entirely and use their fallback instead of paying a timeout per call. After `openMs` a
 * single probe is allowed; its success closes the breaker, its failure opens it again.
 */
export class CircuitBreaker {
  private state: BreakerState = BreakerState.closed;
  private failures = 0;
  private openedAt = 0;
  private probing = false;
  private readonly now: () => number;

  constructor(private readonly options: BreakerOptions) {
    requirePositiveInteger('breaker failureThreshold', options.failureThreshold);
    requirePositiveInteger('breaker openMs', options.openMs);
    this.now = options.now ?? Date.now;
  }

  get current(): BreakerState {
    return this.state;
  }

  /** True when a call may go through now; in half-open, only one probe at a time. */
  allow(): boolean {
    if (this.state === BreakerState.closed) return true;
    if (this.state === BreakerState.open && this.now() - this.openedAt >= this.options.openMs) this.transition(BreakerState.halfOpen);
    if (this.state === BreakerState.halfOpen && !this.probing) {
      this.probing = true;
      return true;
    }
    return false;
  }

  success(): void {
    this.failures = 0;
    this.probing = false;
    if (this.state !== BreakerState.closed) this.transition(BreakerState.closed);
  }

  failure(): void {
    this.probing = false;
    this.failures++;
    if (this.state === BreakerState.halfOpen || (this.state === BreakerState.closed && this.failures >= this.options.failureThreshold)) {
      this.openedAt = this.now();
      this.transition(BreakerState.open);
    }
  }

  private transition(to: BreakerState): void {
    const from = this.state;
    this.state = to;
    this.options.onTransition?.(from, to);
  }
}
