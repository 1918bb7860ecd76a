// The producer's seeded randomness, in 32-bit integer arithmetic (Math.imul, >>> 0): a generator
// computed in floating point loses the low bits of its products and falls into a short cycle (the
// LCG once used here repeated after 10,466 values).

/** mulberry32: small, seeded, period 2^32, so a file or a run can be generated again identically. */
export function seededRandom(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** splitmix32's finaliser: every input bit moves every output bit, so neighbouring inputs give unrelated outputs. */
function mix32(x: number): number {
  let z = (x + 0x9e3779b9) >>> 0;
  z = Math.imul(z ^ (z >>> 16), 0x85ebca6b);
  z = Math.imul(z ^ (z >>> 13), 0xc2b2ae35);
  return (z ^ (z >>> 16)) >>> 0;
}

/**
 * Task `index`'s own generator under `seed`. What a task draws depends on the seed and its index
 * only, never on which other tasks drew before it: workers finish in an order of their own, and a
 * shared generator would hand each task another draw on every run. Seeds above 2^32 keep their
 * high bits.
 */
export function taskRandom(seed: number, index: number): () => number {
  const high = Math.floor(seed / 4294967296) >>> 0;
  return seededRandom(mix32(mix32(mix32(seed >>> 0) ^ high) ^ (index >>> 0)));
}
