import { describe, expect, it } from 'vitest';
import { stopwatch } from './harness';

describe('the fault stopwatch (stopwatch)', () => {
  it('adds up only the stretches it ran, counting the one under way, and ignores a repeated start or stop', () => {
    let t = 1_000;
    const watch = stopwatch(() => t);
    watch.set(false);
    t = 2_000;
    expect(watch.elapsedMs()).toBe(0);
    watch.set(true);
    t = 2_500;
    watch.set(true);
    t = 3_000;
    expect(watch.elapsedMs()).toBe(1_000);
    watch.set(false);
    t = 10_000;
    watch.set(false);
    expect(watch.elapsedMs()).toBe(1_000);
    watch.set(true);
    t = 10_400;
    expect(watch.elapsedMs()).toBe(1_400);
  });
});
