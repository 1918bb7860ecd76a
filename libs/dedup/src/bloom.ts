export interface RecentKeysOptions {
  /** Keys per generation; two generations are kept, so about 2x this many recent keys. */
  readonly capacity: number;
  /** Target false-positive rate of one generation. */
  readonly errorRate: number;
}

/**
 * A Bloom filter over strings: `m` bits, `k` probes by double hashing (Kirsch–Mitzenmacher) from
 * two 32-bit FNV-1a variants computed in one pass. Every committed key goes through `add` on the
 * consumer's hot path, so the hashing is a few integer operations per character, not a 64-bit
 * hash emulated in JavaScript.
 */
/** Bits and probes per key for `capacity` keys at `errorRate`: the filter's sizing, and what the config check bounds. */
export function bloomSize(capacity: number, errorRate: number): { readonly bits: number; readonly hashes: number } {
  const n = Math.max(1, capacity);
  const bits = Math.max(32, Math.ceil((-n * Math.log(errorRate)) / Math.LN2 ** 2));
  return { bits, hashes: Math.max(1, Math.round((bits / n) * Math.LN2)) };
}

export class BloomFilter {
  private readonly words: Uint32Array;
  private readonly m: number;
  private readonly k: number;

  constructor(capacity: number, errorRate: number) {
    const { bits, hashes } = bloomSize(capacity, errorRate);
    this.m = bits;
    this.k = hashes;
    this.words = new Uint32Array(Math.ceil(this.m / 32));
  }

  /** Size in bits, and probes per key: what the capacity and error rate came to. */
  get bits(): number {
    return this.m;
  }

  get hashes(): number {
    return this.k;
  }

  add(key: string): void {
    this.probe(key, true);
  }

  has(key: string): boolean {
    return this.probe(key, false);
  }

  private probe(key: string, set: boolean): boolean {
    let h1 = 0x811c9dc5;
    let h2 = 0x050c5d1f;
    for (let i = 0; i < key.length; i++) {
      const c = key.charCodeAt(i);
      h1 = Math.imul(h1 ^ c, 0x01000193);
      h2 = Math.imul(h2 ^ c, 0x5bd1e995);
    }
    h2 ^= h2 >>> 15;
    h1 >>>= 0;
    h2 = (h2 | 1) >>> 0;
    let found = true;
    for (let i = 0; i < this.k; i++) {
      const bit = ((h1 + Math.imul(i, h2)) >>> 0) % this.m;
      const word = bit >>> 5;
      const mask = 1 << (bit & 31);
      if ((this.words[word]! & mask) === 0) {
        if (!set) return false;
        found = false;
        this.words[word]! |= mask;
      }
    }
    return found;
  }
}

/**
 * Keys this process saw commit recently, in two rotating Bloom filters so memory stays bounded and
 * old keys age out. "No" is certain; "maybe" is only a hint that must be confirmed by the inbox.
 */
export class RecentKeys {
  private current: BloomFilter;
  private previous: BloomFilter | undefined;
  private count = 0;

  constructor(private readonly options: RecentKeysOptions) {
    this.current = new BloomFilter(options.capacity, options.errorRate);
  }

  add(key: string): void {
    if (this.count >= this.options.capacity) {
      this.previous = this.current;
      this.current = new BloomFilter(this.options.capacity, this.options.errorRate);
      this.count = 0;
    }
    this.current.add(key);
    this.count++;
  }

  mightContain(key: string): boolean {
    return this.current.has(key) || (this.previous?.has(key) ?? false);
  }
}
