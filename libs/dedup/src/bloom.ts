import bloom from 'bloom-filters';

export interface RecentKeysOptions {
  /** Keys per generation; two generations are kept, so about 2x this many recent keys. */
  readonly capacity: number;
  /** Target false-positive rate of one generation. */
  readonly errorRate: number;
}

/**
 * Keys this process saw commit recently, in two rotating Bloom filters so memory stays bounded and
 * old keys age out. "No" is certain; "maybe" is only a hint that must be confirmed by the inbox.
 */
export class RecentKeys {
  private current: InstanceType<typeof bloom.BloomFilter>;
  private previous: InstanceType<typeof bloom.BloomFilter> | undefined;
  private count = 0;

  constructor(private readonly options: RecentKeysOptions) {
    this.current = RecentKeys.filter(options);
  }

  private static filter({ capacity, errorRate }: RecentKeysOptions) {
    return bloom.BloomFilter.create(capacity, errorRate);
  }

  add(key: string): void {
    if (this.count >= this.options.capacity) {
      this.previous = this.current;
      this.current = RecentKeys.filter(this.options);
      this.count = 0;
    }
    this.current.add(key);
    this.count++;
  }

  mightContain(key: string): boolean {
    return this.current.has(key) || (this.previous?.has(key) ?? false);
  }
}
