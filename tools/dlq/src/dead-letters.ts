import type { IHeaders, Kafka } from 'kafkajs';

/** What the consumer loop writes on every dead letter (libs/messaging/src/dead-letter.ts). */
export const DlqHeaders = {
  code: 'dlq-error-code',
  message: 'dlq-error-message',
  sourceTopic: 'dlq-source-topic',
  sourcePartition: 'dlq-source-partition',
  sourceOffset: 'dlq-source-offset',
  group: 'dlq-consumer-group',
  failedAt: 'dlq-failed-at',
  valueOmitted: 'dlq-value-omitted',
} as const;
/** How long reading a topic to its end may take (a group join alone takes a few seconds). */
const READ_TIMEOUT_MS = 60_000;
/** Set on a replayed message: where it came from, so a replay can be traced (and is never dead-lettered blind). */
export const REPLAYED_FROM_HEADER = 'dlq-replayed-from';

export interface DeadLetter {
  /** `partition:offset` in the dead-letter topic: what `show` and `replay` take. */
  readonly id: string;
  readonly partition: number;
  readonly offset: string;
  readonly key: string | null;
  readonly value: Buffer | null;
  /** The original message's headers, without the dlq-* ones. */
  readonly headers: Readonly<Record<string, string>>;
  readonly code: string;
  readonly reason: string;
  readonly source: { readonly topic: string; readonly partition: number; readonly offset: string } | null;
  readonly group: string | null;
  readonly failedAt: string | null;
  /** The dead-letter topic refused the value as too large: the original is read from its source. */
  readonly valueOmitted: boolean;
}

/**
 * Kafka headers as strings: the first value of a repeated one, and none for a header sent with a
 * null value (Java clients allow it, and kafkajs reads it as null).
 */
export function headerStrings(headers: IHeaders | undefined): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(headers ?? {})) {
    const one = Array.isArray(v) ? v[0] : v;
    if (one !== undefined && one !== null) out[k] = one.toString();
  }
  return out;
}

function toDeadLetter(partition: number, message: { offset: string; key: Buffer | null; value: Buffer | null; headers?: IHeaders }): DeadLetter {
  const all = headerStrings(message.headers);
  const headers = Object.fromEntries(Object.entries(all).filter(([k]) => !k.startsWith('dlq-')));
  const sourceTopic = all[DlqHeaders.sourceTopic];
  return {
    id: `${partition}:${message.offset}`,
    partition,
    offset: message.offset,
    key: message.key?.toString() ?? null,
    value: message.value,
    headers,
    code: all[DlqHeaders.code] ?? 'UNKNOWN',
    reason: all[DlqHeaders.message] ?? '',
    source: sourceTopic ? { topic: sourceTopic, partition: Number(all[DlqHeaders.sourcePartition]), offset: all[DlqHeaders.sourceOffset] ?? '' } : null,
    group: all[DlqHeaders.group] ?? null,
    failedAt: all[DlqHeaders.failedAt] ?? null,
    valueOmitted: all[DlqHeaders.valueOmitted] !== undefined,
  };
}

/**
 * Reads a topic from its start up to the end it had when the read began, without committing
 * anything: a throwaway consumer group, deleted afterwards. Dead-letter topics are small; this is
 * an operator's tool, not a stream.
 */
export async function readTopic(kafka: Kafka, topic: string, options: { partition?: number; fromOffset?: string; limit?: number } = {}): Promise<{ partition: number; message: { offset: string; key: Buffer | null; value: Buffer | null; headers?: IHeaders } }[]> {
  const admin = kafka.admin();
  await admin.connect();
  const groupId = `labelflow-dlq-reader-${process.pid}-${Date.now()}`;
  const consumer = kafka.consumer({ groupId, allowAutoTopicCreation: false });
  try {
    const ends = (await admin.fetchTopicOffsets(topic)).filter((p) => options.partition === undefined || p.partition === options.partition);
    const remaining = new Map(ends.filter((p) => BigInt(p.high) > BigInt(p.low)).map((p) => [p.partition, BigInt(p.high)]));
    const found: { partition: number; message: { offset: string; key: Buffer | null; value: Buffer | null; headers?: IHeaders } }[] = [];
    if (remaining.size === 0) return found;
    await consumer.connect();
    await consumer.subscribe({ topic, fromBeginning: true });
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`${topic}: not read to its end within ${READ_TIMEOUT_MS / 1000} s`)), READ_TIMEOUT_MS);
      const done = () => {
        clearTimeout(timer);
        resolve();
      };
      consumer
        .run({
          autoCommit: false,
          eachBatch: async ({ batch }) => {
            const end = remaining.get(batch.partition);
            if (end === undefined) return;
            for (const message of batch.messages) {
              if (BigInt(message.offset) >= end) break;
              if (options.fromOffset !== undefined && BigInt(message.offset) < BigInt(options.fromOffset)) continue;
              found.push({ partition: batch.partition, message });
            }
            const last = batch.messages[batch.messages.length - 1];
            if (last && BigInt(last.offset) + 1n >= end) remaining.delete(batch.partition);
            if (remaining.size === 0 || (options.limit !== undefined && found.length >= options.limit)) done();
          },
        })
        .catch(reject);
    });
    return found
      .sort((a, b) => a.partition - b.partition || Number(BigInt(a.message.offset) - BigInt(b.message.offset)))
      .slice(0, options.limit);
  } finally {
    await consumer.disconnect().catch(() => undefined);
    await admin.deleteGroups([groupId]).catch(() => undefined);
    await admin.disconnect();
  }
}

/** Every dead letter of a topic, oldest first per partition. */
export async function listDeadLetters(kafka: Kafka, dlqTopic: string, options: { limit?: number } = {}): Promise<DeadLetter[]> {
  return (await readTopic(kafka, dlqTopic, options)).map(({ partition, message }) => toDeadLetter(partition, message));
}

/** One dead letter by `partition:offset`, or undefined. */
export async function findDeadLetter(kafka: Kafka, dlqTopic: string, id: string): Promise<DeadLetter | undefined> {
  const match = /^(\d+):(\d+)$/.exec(id);
  if (!match) throw new Error(`a dead letter is named partition:offset, e.g. 0:12; got ${JSON.stringify(id)}`);
  const [, partition, offset] = match;
  const [found] = await readTopic(kafka, dlqTopic, { partition: Number(partition), fromOffset: offset, limit: 1 });
  return found && found.message.offset === offset ? toDeadLetter(found.partition, found.message) : undefined;
}

export type ReplayResult = { readonly id: string; readonly ok: true; readonly topic: string } | { readonly id: string; readonly ok: false; readonly reason: string };

/**
 * Publishes each dead letter's original message (key, value, headers) to the topic it came from, so
 * the consumer that gave up on it applies it now (after a fix). Safe to repeat: the consumer's
 * exactly-once gate drops a message it already applied. A letter stored without its value (too
 * large for the dead-letter topic) is replayed from its source coordinates while the broker keeps them.
 */
export async function replayDeadLetters(kafka: Kafka, dlqTopic: string, letters: readonly DeadLetter[]): Promise<ReplayResult[]> {
  const producer = kafka.producer({ idempotent: true, maxInFlightRequests: 1, allowAutoTopicCreation: false });
  await producer.connect();
  try {
    const results: ReplayResult[] = [];
    for (const letter of letters) {
      if (!letter.source) {
        results.push({ id: letter.id, ok: false, reason: 'no dlq-source-topic header: not written by a labelflow consumer' });
        continue;
      }
      let { value, key, headers } = letter;
      if (letter.valueOmitted) {
        const [original] = await readTopic(kafka, letter.source.topic, { partition: letter.source.partition, fromOffset: letter.source.offset, limit: 1 });
        if (!original || original.message.offset !== letter.source.offset) {
          results.push({ id: letter.id, ok: false, reason: `its value was omitted and ${letter.source.topic} ${letter.source.partition}:${letter.source.offset} is no longer retained` });
          continue;
        }
        value = original.message.value;
        key = original.message.key?.toString() ?? null;
        headers = headerStrings(original.message.headers);
      }
      await producer.send({
        topic: letter.source.topic,
        acks: -1,
        messages: [{ key, value, headers: { ...headers, [REPLAYED_FROM_HEADER]: `${dlqTopic}:${letter.id}` } }],
      });
      results.push({ id: letter.id, ok: true, topic: letter.source.topic });
    }
    return results;
  } finally {
    await producer.disconnect();
  }
}
