import { describe, expect, it } from 'vitest';
import { BloomFilter, RecentKeys } from './bloom';
import { bloomBytes } from './config';

const keys = (prefix: string, n: number) => Array.from({ length: n }, (_, i) => `${prefix}${7_000_000_000_000_000_000n + BigInt(i * 7919)}:LabelSubmitted:${1 + (i % 3)}`);

describe('the Bloom filter behind the dedup fallback', () => {
  it('is sized as the config check computes it, so the check bounds what a service allocates', () => {
    for (const [capacity, rate] of [[10, 0.5], [1_000_000, 0.01], [20_000, 0.000001], [3, 0.9]] as const) {
      expect(bloomBytes(capacity, rate), `${capacity} at ${rate}`).toBe(Math.ceil(new BloomFilter(capacity, rate).bits / 32) * 4);
    }
  });

  it('never answers no for a key it was given', () => {
    const filter = new BloomFilter(20_000, 0.01);
    const added = keys('a', 20_000);
    added.forEach((k) => filter.add(k));
    expect(added.every((k) => filter.has(k))).toBe(true);
  });

  it('answers maybe for unseen keys at about its configured rate when full', () => {
    const filter = new BloomFilter(20_000, 0.01);
    keys('a', 20_000).forEach((k) => filter.add(k));
    const falsePositives = keys('b', 20_000).filter((k) => filter.has(k)).length / 20_000;
    expect(falsePositives).toBeGreaterThan(0.002);
    expect(falsePositives).toBeLessThan(0.02);
  });

  it('keeps the previous generation after rotating, and forgets the one before it', () => {
    const recent = new RecentKeys({ capacity: 1_000, errorRate: 0.001 });
    const [oldest, older, newest] = [keys('x', 1_000), keys('y', 1_000), keys('z', 500)];
    [...oldest, ...older, ...newest].forEach((k) => recent.add(k));
    expect([...older, ...newest].every((k) => recent.mightContain(k))).toBe(true);
    expect(oldest.filter((k) => recent.mightContain(k)).length).toBeLessThan(50);
  });
});
