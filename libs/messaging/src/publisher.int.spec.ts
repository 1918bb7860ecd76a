import { Partitioners, type Kafka } from 'kafkajs';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { captureLogs, sparePort, uniqueName } from '@labelflow/testing';
import { createKafka, createPublisher, createServedTopics, ensureTopics, PublishError, type KafkaPublisher, type OutgoingMessage } from './index';

const infra = inject('infra');
const brokers = infra.kafkaBrokers.split(',');
const { logger } = captureLogs({ service: 'publisher-test', level: 'error' });

interface Landed {
  readonly partition: number;
  readonly key: string;
  readonly value: string;
  readonly headers: Record<string, string>;
}

/** Every message of `topic` with the partition it landed in, read with kafkajs (a client the publisher does not use). */
async function landed(kafka: Kafka, topic: string, expected: number): Promise<Landed[]> {
  const consumer = kafka.consumer({ groupId: uniqueName('publisher-reader') });
  const seen: Landed[] = [];
  await consumer.connect();
  try {
    await consumer.subscribe({ topic, fromBeginning: true });
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`read ${seen.length} of ${expected} messages from ${topic} in 30 s`)), 30_000);
      void consumer.run({
        eachMessage: async ({ partition, message }) => {
          const headers = Object.fromEntries(Object.entries(message.headers ?? {}).map(([k, v]) => [k, String(v)]));
          seen.push({ partition, key: message.key?.toString() ?? '', value: message.value?.toString() ?? '', headers });
          if (seen.length >= expected) {
            clearTimeout(timer);
            resolve();
          }
        },
      });
    });
  } finally {
    await consumer.disconnect();
  }
  return seen;
}

describe('the Kafka publisher (createPublisher)', () => {
  const kafka = createKafka({ brokers, clientId: 'publisher-test', logger });
  let publisher: KafkaPublisher;

  beforeAll(async () => {
    publisher = createPublisher({ brokers, clientId: uniqueName('publisher-test') });
    await publisher.connect();
  });
  afterAll(() => publisher.disconnect());

  it('puts each key in the partition the Java client and kafkajs choose, keeping its messages in order with their headers', async () => {
    const topic = uniqueName('publisher-topic');
    await ensureTopics(kafka, [topic], 6);
    const messages: OutgoingMessage[] = Array.from({ length: 300 }, (_, i) => ({
      topic,
      key: `${7_390_000_000_000_000_000n + BigInt(i % 50)}`,
      value: JSON.stringify({ seq: i }),
      headers: { 'event-type': 'TaskCreated', 'event-version': '1' },
    }));
    await publisher.send(messages.slice(0, 120));
    await publisher.send(messages.slice(120));

    const read = await landed(kafka, topic, messages.length);
    const kafkajsChoice = Partitioners.DefaultPartitioner();
    const partitionMetadata = Array.from({ length: 6 }, (_, partitionId) => ({ partitionId, partitionErrorCode: 0, leader: 0, replicas: [0], isr: [0], offlineReplicas: [] }));
    for (const m of read) {
      expect(m.partition, `key ${m.key}`).toBe(kafkajsChoice({ topic, partitionMetadata, message: { key: m.key, value: m.value } }));
      expect(m.headers).toEqual({ 'event-type': 'TaskCreated', 'event-version': '1' });
    }
    for (const key of new Set(messages.map((m) => m.key))) {
      const sent = messages.filter((m) => m.key === key).map((m) => m.value);
      expect(read.filter((m) => m.key === key).map((m) => m.value), `order of key ${key}`).toEqual(sent);
    }
  });

  it('fails a send the broker refuses as too large with type MESSAGE_TOO_LARGE, and sends to the same partitions again afterwards', async () => {
    const topic = uniqueName('publisher-small');
    const admin = kafka.admin();
    await admin.connect();
    try {
      await createServedTopics(admin, [{ topic, numPartitions: 2, configEntries: [{ name: 'max.message.bytes', value: '2048' }] }]);
    } finally {
      await admin.disconnect();
    }
    // 'a' and 'd' hash to different partitions of two (murmur2, as the first test checks).
    const small = (key: string, n: number): OutgoingMessage => ({ topic, key, value: `small ${key}${n}`, headers: {} });
    await publisher.send([small('a', 1), small('d', 1)]);

    // One request for both partitions: 'a''s partition is written, 'd''s refused.
    const error = await publisher.send([small('a', 2), small('d', 2), { topic, key: 'd', value: 'x'.repeat(8192), headers: {} }]).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(PublishError);
    expect((error as PublishError).type).toBe('MESSAGE_TOO_LARGE');
    expect((error as PublishError).retriable).toBe(true);

    // Were the sequence numbers of the written partition left behind the broker's, this would be
    // refused as OUT_OF_ORDER_SEQUENCE_NUMBER for good.
    await publisher.send([small('a', 3), small('d', 3)]);
    const read = await landed(kafka, topic, 5);
    expect(new Set(read.map((m) => m.partition)).size).toBe(2);
    expect(read.map((m) => m.value).sort()).toEqual(['small a1', 'small a2', 'small a3', 'small d1', 'small d3']);
  });

  it('fails connect with a PublishError naming the brokers when none answers', async () => {
    const nobody = [`127.0.0.1:${await sparePort()}`];
    const lonely = createPublisher({ brokers: nobody, clientId: uniqueName('publisher-test'), retries: 2 });
    try {
      const error = await lonely.connect().then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(error).toBeInstanceOf(PublishError);
      expect((error as Error).message).toContain(nobody[0]);
    } finally {
      await lonely.disconnect();
    }
  });
});
