import { describe, expect, it } from 'vitest';
import { seededRandom, taskRandom } from './random';

/**
 * Whether the generator's output falls into a cycle within `draws` (Brent's method on pairs of
 * values): a pair saved at each power of two is looked for until the next one, so a cycle is found
 * even behind a run-in that never comes round again, as the old floating-point LCG's was.
 */
function cyclesWithin(random: () => number, draws: number): boolean {
  let [x, y] = [random(), random()];
  let saved = [x, y];
  for (let i = 1, power = 1, since = 0; i < draws; i++) {
    [x, y] = [y, random()];
    if (x === saved[0] && y === saved[1]) return true;
    if (++since === power) [saved, power, since] = [[x, y], power * 2, 0];
  }
  return false;
}

describe('the producer\'s seeded randomness', () => {
  it('does not cycle within a million draws, for any of a few seeds', () => {
    for (const seed of [0, 1, 7, 42, 2 ** 40 + 3]) {
      expect(cyclesWithin(seededRandom(seed), 1_000_000), `seed ${seed}`).toBe(false);
      expect(cyclesWithin(taskRandom(seed, 9_999), 1_000_000), `seed ${seed}, task 9999`).toBe(false);
    }
  });

  it('gives every task of a seed a generator of its own, the same on every run, and other seeds other ones', () => {
    const first = (seed: number, index: number) => taskRandom(seed, index)();
    expect(first(42, 3)).toBe(first(42, 3));
    const firsts = new Set(Array.from({ length: 10_000 }, (_, i) => first(42, i)));
    expect(firsts.size).toBeGreaterThan(9_990);
    expect(first(43, 3)).not.toBe(first(42, 3));
    expect(first(2 ** 32 + 42, 3)).not.toBe(first(42, 3));
  });
});
