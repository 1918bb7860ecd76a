import { Kafka, logLevel, type Message, type Producer } from 'kafkajs';
import { fixKafkajsIdleLoop, kafkajsSecurity, type KafkaSecurity } from '@labelflow/messaging';
import { seededRandom } from './random';

export interface Duplicator {
  readonly duplicated: () => number;
  /** Messages delivered a second time, by their `event-type` header: what each consumer must catch. */
  readonly duplicatedByType: () => Readonly<Record<string, number>>;
  stop(): Promise<void>;
}

/**
 * Re-delivers a fraction of every message published on the saga's topics, byte for byte: the
 * network or a retry repeating a step. The services must apply each effect once all the same.
 */
export async function startDuplicator({ brokers, security, topics, rate, seed = 1 }: { brokers: readonly string[]; security?: KafkaSecurity; topics: readonly string[]; rate: number; seed?: number }): Promise<Duplicator> {
  // A load driver that spins in kafkajs's idle timer loop takes CPU from the services it measures.
  fixKafkajsIdleLoop();
  const kafka = new Kafka({ clientId: 'labelflow-duplicator', brokers: [...brokers], ...kafkajsSecurity(security), logLevel: logLevel.NOTHING });
  // Fetches wait for a batch as the services' do (64 KiB or 50 ms), not for every message: a load
  // driver on the machine it measures must cost as little as it can.
  const consumer = kafka.consumer({ groupId: `labelflow-duplicator-${Date.now()}-${Math.random().toString(36).slice(2)}`, minBytes: 65_536, maxWaitTimeInMs: 50 });
  const producer: Producer = kafka.producer();
  let count = 0;
  const byType: Record<string, number> = {};
  const random = seededRandom(seed);
  await Promise.all([consumer.connect(), producer.connect()]);
  // Listen before run(): the join can complete before run() returns, and a missed join would hang.
  // Duplicates of the very first events must not be missed, so production starts after it.
  const joined = new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('the duplicator did not join its group within 30 s')), 30_000);
    const off = consumer.on(consumer.events.GROUP_JOIN, () => {
      clearTimeout(timer);
      off();
      resolve();
    });
  });
  for (const topic of topics) await consumer.subscribe({ topic, fromBeginning: false });
  await consumer.run({
    // One produce request per fetched batch, not one per duplicate.
    eachBatch: async ({ batch }) => {
      const again: Message[] = [];
      const types: string[] = [];
      for (const message of batch.messages) {
        if (message.headers?.['x-duplicate'] || random() >= rate) continue;
        again.push({ key: message.key, value: message.value, headers: { ...message.headers, 'x-duplicate': '1' } });
        types.push(message.headers?.['event-type']?.toString() ?? 'unknown');
      }
      if (again.length === 0) return;
      await producer.send({ topic: batch.topic, messages: again });
      count += again.length;
      for (const type of types) byType[type] = (byType[type] ?? 0) + 1;
    },
  });
  await joined;
  return {
    duplicated: () => count,
    duplicatedByType: () => ({ ...byType }),
    stop: async () => {
      await consumer.disconnect();
      await producer.disconnect();
    },
  };
}
