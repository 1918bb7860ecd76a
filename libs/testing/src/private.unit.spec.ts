import { readFileSync } from 'node:fs';
import { afterEach, describe, expect, it } from 'vitest';
import { spareBase, sparePort } from './private';

const poolId = process.env['VITEST_POOL_ID'];
const ephemeralLow = (): number => {
  const low = Number(readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').trim().split(/\s+/)[0]);
  return Number.isInteger(low) && low > 20_100 ? low : 32_768;
};

describe('spare ports', () => {
  afterEach(() => {
    process.env['VITEST_POOL_ID'] = poolId;
  });

  it('never hands out the same port twice in one process, even to concurrent callers', async () => {
    const ports = await Promise.all(Array.from({ length: 200 }, () => sparePort()));
    expect(new Set(ports).size).toBe(200);
  });

  it('gives a run of consecutive ports none of which was handed out before', async () => {
    const single = new Set(await Promise.all(Array.from({ length: 50 }, () => sparePort())));
    const base = await spareBase(5);
    for (let i = 0; i < 5; i++) expect(single.has(base + i)).toBe(false);
    expect(await sparePort()).not.toBe(base);
  });

  it('draws each vitest worker’s ports from a slice of its own, so two workers side by side never pick the same one', async () => {
    const size = Math.floor((ephemeralLow() - 20_000) / 8);
    const drawn = new Map<number, number[]>();
    for (const pool of [1, 2, 3]) {
      process.env['VITEST_POOL_ID'] = String(pool);
      drawn.set(pool, await Promise.all(Array.from({ length: 30 }, () => sparePort())));
    }
    for (const [pool, ports] of drawn) {
      const low = 20_000 + (pool - 1) * size;
      for (const port of ports) {
        expect(port).toBeGreaterThanOrEqual(low);
        expect(port).toBeLessThan(low + size);
      }
    }
  });
});
