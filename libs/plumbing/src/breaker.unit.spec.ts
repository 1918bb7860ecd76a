import { describe, expect, it } from 'vitest';
import { BreakerState, CircuitBreaker } from './breaker';
import { PlumbingErrors } from './errors';

const setup = () => {
  let now = 0;
  const transitions: string[] = [];
  const breaker = new CircuitBreaker({ failureThreshold: 3, openMs: 1_000, now: () => now, onTransition: (from, to) => transitions.push(`${from}->${to}`) });
  return { breaker, transitions, advance: (ms: number) => (now += ms) };
};

describe('the circuit breaker', () => {
  it('stays closed below the failure threshold and a success resets the count', () => {
    const { breaker } = setup();
    breaker.failure();
    breaker.failure();
    breaker.success();
    breaker.failure();
    breaker.failure();
    expect(breaker.current).toBe(BreakerState.closed);
    expect(breaker.allow()).toBe(true);
  });

  it('opens after consecutive failures and refuses calls while open', () => {
    const { breaker, transitions, advance } = setup();
    for (let i = 0; i < 3; i++) breaker.failure();
    expect(breaker.current).toBe(BreakerState.open);
    advance(999);
    expect(breaker.allow()).toBe(false);
    expect(transitions).toEqual(['closed->open']);
  });

  it('lets exactly one probe through when half-open and closes on its success', () => {
    const { breaker, transitions, advance } = setup();
    for (let i = 0; i < 3; i++) breaker.failure();
    advance(1_000);
    expect(breaker.allow()).toBe(true);
    expect(breaker.allow()).toBe(false);
    breaker.success();
    expect(breaker.current).toBe(BreakerState.closed);
    expect(transitions).toEqual(['closed->open', 'open->half_open', 'half_open->closed']);
  });

  it('reopens when the half-open probe fails, and waits the full open period again', () => {
    const { breaker, advance } = setup();
    for (let i = 0; i < 3; i++) breaker.failure();
    advance(1_000);
    expect(breaker.allow()).toBe(true);
    breaker.failure();
    expect(breaker.current).toBe(BreakerState.open);
    advance(500);
    expect(breaker.allow()).toBe(false);
    advance(500);
    expect(breaker.allow()).toBe(true);
  });

  it('refuses a threshold or an open period that is not a positive integer', () => {
    expect(() => new CircuitBreaker({ failureThreshold: 0, openMs: 1_000 })).toThrow(expect.objectContaining({ code: PlumbingErrors.CONFIG_INVALID }));
    expect(() => new CircuitBreaker({ failureThreshold: 3, openMs: 1.5 })).toThrow(expect.objectContaining({ code: PlumbingErrors.CONFIG_INVALID }));
  });
});
