import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { Admin } from '@platformatic/kafka';
import { Kafka, logLevel, type IHeaders, type KafkaMessage } from 'kafkajs';
import { repoRoot } from './infra';
import { uniqueName } from './names';

const run = promisify(execFile);

const client = (brokers: string) => new Kafka({ clientId: uniqueName('test'), brokers: brokers.split(','), logLevel: logLevel.NOTHING });

/** Produces raw bytes to a topic, bypassing every schema: for garbage and replay tests. */
export async function produceRaw(brokers: string, topic: string, messages: readonly { key?: string | null; value: string | Buffer | null; headers?: IHeaders; partition?: number }[]): Promise<void> {
  const producer = client(brokers).producer({ allowAutoTopicCreation: false });
  await producer.connect();
  try {
    await producer.send({ topic, messages: messages.map((m) => ({ key: m.key ?? null, value: m.value, headers: m.headers, ...(m.partition === undefined ? {} : { partition: m.partition }) })) });
  } finally {
    await producer.disconnect();
  }
}

export interface JavaRecord {
  readonly key: string;
  readonly value: string;
  /** A null value is sent as a header of length -1, which Java clients allow and kafkajs cannot send. */
  /** At least one: the console producer cannot parse an empty header list (send those with produceRaw). */
  readonly headers: Readonly<Record<string, string | null>>;
}

/**
 * Produces through Apache Kafka's own Java client (kafka.tools.ConsoleProducer from the jars that
 * infra/local/kafka.sh installs), for what other producers send and kafkajs cannot, such as null
 * header values. Keys, values and headers must not contain tabs or newlines, header names no ',' or ':',
 * header values no ','.
 */
export async function produceWithJavaClient(brokers: string, topic: string, records: readonly JavaRecord[]): Promise<void> {
  const nullMarker = '<null>';
  const plain = (s: string, what: string, forbidden: RegExp) => {
    if (forbidden.test(s) || s === nullMarker) throw new Error(`produceWithJavaClient: ${what} ${JSON.stringify(s)} cannot be sent through the console producer`);
    return s;
  };
  const lines = records.map((r) => {
    if (Object.keys(r.headers).length === 0) throw new Error('produceWithJavaClient: every record needs a header; send header-less ones with produceRaw');
    const headers = Object.entries(r.headers).map(([k, v]) => `${plain(k, 'header name', /[\t\n,:]/)}:${v === null ? nullMarker : plain(v, 'header value', /[\t\n,]/)}`);
    return [headers.join(','), plain(r.key, 'key', /[\t\n]/), plain(r.value, 'value', /[\t\n]/)].join('\t');
  });
  await run('bash', [join(repoRoot, 'infra/local/kafka.sh'), 'install'], { timeout: 10 * 60_000 });
  const libs = process.env.KAFKA_LIBS ?? join(process.env.LABELFLOW_LOCAL_DIR ?? join(repoRoot, '.local'), 'kafka/libs');
  const producer = run(
    'java',
    ['-cp', `${libs}/*`, 'kafka.tools.ConsoleProducer', '--bootstrap-server', brokers, '--topic', topic, '--sync', '--request-required-acks', 'all',
      '--property', 'parse.key=true', '--property', 'parse.headers=true', '--property', `null.marker=${nullMarker}`],
    { timeout: 120_000 },
  );
  producer.child.stdin?.end(`${lines.join('\n')}\n`);
  await producer;
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

/**
 * Where `topics` end now, partition by partition, as one comparable string: two equal readings
 * mean nothing was written to any of them in between.
 */
export async function topicEnds(brokers: string, topics: readonly string[]): Promise<string> {
  const admin = client(brokers).admin();
  await admin.connect();
  try {
    const ends: string[] = [];
    for (const topic of [...topics].sort()) {
      const offsets = await admin.fetchTopicOffsets(topic);
      ends.push(`${topic}:${offsets.sort((a, b) => a.partition - b.partition).map((o) => o.high).join(',')}`);
    }
    return ends.join(' ');
  } finally {
    await admin.disconnect();
  }
}

/** Rewinds a (stopped) consumer group to the beginning of `topics`: a full replay on restart. */
export async function rewindGroup(brokers: string, groupId: string, topics: readonly string[]): Promise<void> {
  // One OffsetCommit through an admin, not kafkajs's resetOffsets: that joins the group with a
  // consumer of its own and waits for its first fetch, about 5 s a topic.
  const kafkajsAdmin = client(brokers).admin();
  await kafkajsAdmin.connect();
  const starts = await Promise.all(topics.map(async (name) => ({ name, partitionOffsets: (await kafkajsAdmin.fetchTopicOffsets(name)).map((p) => ({ partition: p.partition, offset: BigInt(p.low) })) }))).finally(() => kafkajsAdmin.disconnect());
  const admin = new Admin({ clientId: uniqueName('test-rewind'), bootstrapBrokers: brokers.split(',') });
  try {
    await admin.alterConsumerGroupOffsets({ groupId, topics: starts });
  } finally {
    await admin.close();
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
