import { Kafka, logLevel, type IHeaders, type KafkaMessage } from 'kafkajs';
import { uniqueName } from './names';

const client = (brokers: string) => new Kafka({ clientId: uniqueName('test'), brokers: brokers.split(','), logLevel: logLevel.NOTHING });

/** Produces raw bytes to a topic, bypassing every schema: for garbage and replay tests. */
export async function produceRaw(brokers: string, topic: string, messages: readonly { key?: string | null; value: string | Buffer | null; headers?: IHeaders }[]): Promise<void> {
  const producer = client(brokers).producer({ allowAutoTopicCreation: false });
  await producer.connect();
  try {
    await producer.send({ topic, messages: messages.map((m) => ({ key: m.key ?? null, value: m.value, headers: m.headers })) });
  } finally {
    await producer.disconnect();
  }
}

/** Reads a topic from the beginning with a fresh group until `until` holds for what was read. */
export async function readTopic(brokers: string, topic: string, until: (messages: readonly KafkaMessage[]) => boolean, timeoutMs = 30_000): Promise<KafkaMessage[]> {
  const consumer = client(brokers).consumer({ groupId: uniqueName('reader') });
  const seen: KafkaMessage[] = [];
  await consumer.connect();
  try {
    await consumer.subscribe({ topic, fromBeginning: true });
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`read ${seen.length} messages from ${topic} in ${timeoutMs} ms without meeting the condition`)), timeoutMs);
      void consumer.run({
        eachMessage: async ({ message }) => {
          seen.push(message);
          if (until(seen)) {
            clearTimeout(timer);
            resolve();
          }
        },
      });
    });
    return seen;
  } finally {
    await consumer.disconnect();
  }
}

/** Total lag of a consumer group over `topics`: 0 means it committed everything published so far. */
export async function consumerLag(brokers: string, groupId: string, topics: readonly string[]): Promise<number> {
  const admin = client(brokers).admin();
  await admin.connect();
  try {
    let lag = 0;
    for (const topic of topics) {
      const ends = await admin.fetchTopicOffsets(topic);
      const [committed] = await admin.fetchOffsets({ groupId, topics: [topic] });
      for (const end of ends) {
        const done = Number(committed?.partitions.find((p) => p.partition === end.partition)?.offset ?? -1);
        lag += Number(end.high) - Math.max(done, 0);
      }
    }
    return lag;
  } finally {
    await admin.disconnect();
  }
}

/** Rewinds a (stopped) consumer group to the beginning of `topics`: a full replay on restart. */
export async function rewindGroup(brokers: string, groupId: string, topics: readonly string[]): Promise<void> {
  const admin = client(brokers).admin();
  await admin.connect();
  try {
    for (const topic of topics) await admin.resetOffsets({ groupId, topic, earliest: true });
  } finally {
    await admin.disconnect();
  }
}

/** Every message currently on `topic` (reads up to the high watermark). */
export async function readAll(brokers: string, topic: string): Promise<KafkaMessage[]> {
  const admin = client(brokers).admin();
  await admin.connect();
  const ends = await admin.fetchTopicOffsets(topic).finally(() => admin.disconnect());
  const total = ends.reduce((n, p) => n + Number(p.high) - Number(p.low), 0);
  return total === 0 ? [] : readTopic(brokers, topic, (m) => m.length >= total);
}
