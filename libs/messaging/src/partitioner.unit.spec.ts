import { createRequire } from 'node:module';
import { randomBytes } from 'node:crypto';
import { Partitioners, type PartitionerArgs } from 'kafkajs';
import { describe, expect, it } from 'vitest';
import { KeyPartitioner, murmur2 } from './partitioner';

// kafkajs's own murmur2 is the oracle: the fast one must agree with it on every key.
const kafkajsMurmur2 = createRequire(import.meta.url)('kafkajs/src/producer/partitioners/default/murmur2') as (key: Buffer | string) => number;

const metadata = (n: number) => Array.from({ length: n }, (_, partitionId) => ({ partitionId, leader: 1, replicas: [1], isr: [1], partitionErrorCode: 0 }));
const args = (key: Buffer | string | null, partitions: number, partition?: number): PartitionerArgs => ({
  topic: 't',
  partitionMetadata: metadata(partitions),
  message: { key, value: 'v', ...(partition === undefined ? {} : { partition }) },
});

describe('the fast murmur2 partitioner', () => {
  it('hashes every key as kafkajs does: random bytes of every length up to 64, and task ids', () => {
    for (let i = 0; i < 5_000; i++) {
      const key = randomBytes(i % 65);
      expect(murmur2(key)).toBe(kafkajsMurmur2(key));
    }
    for (let i = 0; i < 2_000; i++) {
      const taskId = String(7_399_162_212_001_239_040n + BigInt(i) * 4_194_305n);
      expect(murmur2(taskId)).toBe(kafkajsMurmur2(taskId));
    }
  });

  it('hashes non-ASCII string keys by their UTF-8 bytes, as kafkajs does', () => {
    for (const key of ['', 'é', 'tâche-42', '任务-7', '🙂🙂x', 'a\u0000b']) expect(murmur2(key)).toBe(kafkajsMurmur2(key));
  });

  it('puts a keyed message in the partition kafkajs default partitioner chooses, for any partition count', () => {
    const ours = KeyPartitioner();
    const theirs = Partitioners.DefaultPartitioner();
    for (let i = 0; i < 3_000; i++) {
      const key = i % 2 === 0 ? String(1_000_000_000_000 + i * 7919) : randomBytes(1 + (i % 30));
      const partitions = 1 + (i % 48);
      expect(ours(args(key, partitions))).toBe(theirs(args(key, partitions)));
    }
  });

  it('keeps a partition the message names, and spreads unkeyed messages over every partition', () => {
    const ours = KeyPartitioner();
    expect(ours(args('7399162212001239041', 6, 4))).toBe(4);
    const seen = new Set(Array.from({ length: 12 }, () => ours(args(null, 6))));
    expect([...seen].sort()).toEqual([0, 1, 2, 3, 4, 5]);
  });
});
