import { describe, expect, it } from 'vitest';
import { sweepClock } from './sweeper';

const now = new Date('2026-11-23T12:00:00.000Z');

describe('the clock deadlines are judged by', () => {
  it('is the wall clock for a service that consumes nothing', () => {
    expect(sweepClock({ now: () => now })).toEqual(now);
  });

  it('holds back to the instant the consumer has caught up to, so no deadline fires on a view older than the events behind it', () => {
    const caughtUp = now.getTime() - 45_000;
    expect(sweepClock({ now: () => now, caughtUpTo: () => caughtUp })).toEqual(new Date(caughtUp));
  });

  it('is the wall clock once the consumer is caught up past it', () => {
    expect(sweepClock({ now: () => now, caughtUpTo: () => now.getTime() + 5 })).toEqual(now);
  });

  it('says wait while the consumer has not yet shown how far it got, as right after a restart', () => {
    expect(sweepClock({ now: () => now, caughtUpTo: () => undefined })).toBeUndefined();
  });
});
