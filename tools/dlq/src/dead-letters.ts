import { randomUUID } from 'node:crypto';
import type { IHeaders, Kafka } from 'kafkajs';
import { hasJsonStringLongerThan, V8_LENGTH_HASHED_STRING } from '@labelflow/plumbing';

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
  /** `<dlq topic>:<id>` when the message was itself a replay of that letter, and failed again. */
  readonly replayedFrom: string | null;
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

/** Source coordinates the broker can be asked for, or none: headers are whatever the writer wrote. */
function sourceOf(all: Readonly<Record<string, string>>): DeadLetter['source'] {
  const topic = all[DlqHeaders.sourceTopic];
  const partition = all[DlqHeaders.sourcePartition];
  const offset = all[DlqHeaders.sourceOffset];
  if (!topic || !/^[A-Za-z0-9._-]{1,249}$/.test(topic) || !partition || !/^\d{1,9}$/.test(partition) || !offset || !/^\d{1,19}$/.test(offset)) return null;
  return { topic, partition: Number(partition), offset };
}

export function toDeadLetter(partition: number, message: { offset: string; key: Buffer | null; value: Buffer | null; headers?: IHeaders }): DeadLetter {
  const all = headerStrings(message.headers);
  const headers = Object.fromEntries(Object.entries(all).filter(([k]) => !k.startsWith('dlq-')));
  return {
    id: `${partition}:${message.offset}`,
    partition,
    offset: message.offset,
    key: message.key?.toString() ?? null,
    value: message.value,
    headers,
    code: all[DlqHeaders.code] ?? 'UNKNOWN',
    reason: all[DlqHeaders.message] ?? '',
    source: sourceOf(all),
    group: all[DlqHeaders.group] ?? null,
    failedAt: all[DlqHeaders.failedAt] ?? null,
    valueOmitted: all[DlqHeaders.valueOmitted] !== undefined,
    replayedFrom: all[REPLAYED_FROM_HEADER] ?? null,
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
  // Unique per read: two reads at once under one group would split the partitions between them.
  const groupId = `labelflow-dlq-reader-${randomUUID()}`;
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

const LETTER_ID = /^(\d{1,9}):(\d{1,19})$/;

function parseId(id: string): { partition: number; offset: string } {
  const match = LETTER_ID.exec(id);
  if (!match) throw new Error(`a dead letter is named partition:offset, e.g. 0:12; got ${JSON.stringify(id)}`);
  return { partition: Number(match[1]), offset: match[2]! };
}

/** One dead letter by `partition:offset`, or undefined. */
export async function findDeadLetter(kafka: Kafka, dlqTopic: string, id: string): Promise<DeadLetter | undefined> {
  const { partition, offset } = parseId(id);
  const [found] = await readTopic(kafka, dlqTopic, { partition, fromOffset: offset, limit: 1 });
  return found && found.message.offset === offset ? toDeadLetter(found.partition, found.message) : undefined;
}

/**
 * Several dead letters by id, from one read of the topic, in the topic's order (partition, then
 * offset) whatever order they were named in, so a task's letters go back oldest first. An id the
 * topic does not hold comes back as itself. With every letter of the topic, for planReplay.
 */
export async function findDeadLetters(kafka: Kafka, dlqTopic: string, ids: readonly string[]): Promise<{ readonly found: (DeadLetter | string)[]; readonly topic: readonly DeadLetter[] }> {
  for (const id of ids) parseId(id);
  const topic = await listDeadLetters(kafka, dlqTopic);
  const byId = new Map(topic.map((l) => [l.id, l]));
  const order = (id: string) => parseId(id);
  const found = [...new Set(ids)]
    .sort((a, b) => order(a).partition - order(b).partition || Number(BigInt(order(a).offset) - BigInt(order(b).offset)))
    .map((id) => byId.get(id) ?? id);
  return { found, topic };
}

/**
 * A replay's answer per letter. `skipped`: left out on purpose (see planReplay), which is no
 * failure of the replay; otherwise not sent for a reason the operator must look at.
 */
export type ReplayResult =
  | { readonly id: string; readonly ok: true; readonly topic: string }
  | { readonly id: string; readonly ok: false; readonly reason: string; readonly skipped?: true };

/**
 * Letters that fail again whatever is fixed: bytes that are no event (empty, not JSON). A decode
 * failure for another reason (`message could not be read: …`, a throw in the consumer's own
 * reading) is a bug an upgrade can fix, and is replayed.
 */
const unreadable = (letter: DeadLetter): boolean => letter.code === 'MESSAGING_DECODE_FAILED' && /^(value is not JSON|empty message value)/.test(letter.reason);

/**
 * The event id of a letter's value (every labelflow event has one), or none: a value that is not a
 * JSON object with an `id`, or one of overlong strings (parsing those is what json-guard is for).
 */
function eventIdOf(value: Buffer | null): string | undefined {
  if (!value || hasJsonStringLongerThan(value, V8_LENGTH_HASHED_STRING)) return undefined;
  try {
    const id: unknown = (JSON.parse(value.toString('utf8')) as { id?: unknown } | null)?.id;
    return typeof id === 'string' && id !== '' ? id : undefined;
  } catch {
    return undefined;
  }
}

/**
 * For each letter, the letter that stands for the message it carries: the newest one (in the
 * topic's order) of every letter of that message. Two letters carry one message when they share
 * source coordinates (the consumer read the offset again before its commit) or the event id on one
 * source topic: when two services dead-letter one message, replaying the other service's letter
 * brings this consumer a copy (new coordinates, same event) that it may dead-letter again, and a
 * relay's or the duplicator's second delivery is the same event too.
 */
function standIns(letters: readonly DeadLetter[]): Map<string, DeadLetter> {
  const parent = letters.map((_, i) => i);
  const root = (i: number): number => {
    const up = parent[i] ?? i;
    if (up === i) return i;
    const top = root(up);
    parent[i] = top;
    return top;
  };
  const firstWith = new Map<string, number>();
  letters.forEach((letter, i) => {
    if (!letter.source) return;
    const id = eventIdOf(letter.value);
    const { topic, partition, offset } = letter.source;
    for (const key of [`at ${topic} ${partition}:${offset}`, ...(id === undefined ? [] : [`event ${topic} ${id}`])]) {
      const j = firstWith.get(key);
      if (j === undefined) firstWith.set(key, i);
      else parent[root(i)] = root(j);
    }
  });
  const later = (a: DeadLetter, b: DeadLetter) => a.partition - b.partition || Number(BigInt(a.offset) - BigInt(b.offset));
  const newest = new Map<number, DeadLetter>();
  letters.forEach((letter, i) => {
    const was = newest.get(root(i));
    if (!was || later(letter, was) > 0) newest.set(root(i), letter);
  });
  return new Map(letters.map((letter, i) => [letter.id, newest.get(root(i)) ?? letter]));
}

/**
 * Which letters a replay sends, and why it leaves out the others:
 * - a letter without usable source coordinates (not written by a labelflow consumer, or garbled);
 * - a letter whose bytes are not an event (empty, not JSON): the same bytes fail again, and every
 *   consumer of the source topic dead-letters another copy;
 * - a letter that was replayed before and failed again: the newer letter (its `replayedFrom` names
 *   this one) stands for it, so a repeated `replay --all` sends the message once, not once per try;
 * - a letter of a message a newer letter also carries (`standIns`): the same source coordinates,
 *   or the same event from the same topic, such as the copy that replaying another service's
 *   letter of it brought to this consumer, which failed here again. One send reaches every
 *   consumer of the topic, so the message goes once, through the newest of its letters.
 * `topic` is every letter of the topic, so that a newer letter left out of the selection (another
 * code) still stands for the one selected.
 */
export function planReplay(dlqTopic: string, letters: readonly DeadLetter[], topic: readonly DeadLetter[] = letters): { readonly send: readonly DeadLetter[]; readonly refused: readonly ReplayResult[] } {
  const retried = new Set(topic.flatMap((l) => (l.replayedFrom ? [l.replayedFrom] : [])));
  const sendable = (l: DeadLetter) => l.source !== null && !unreadable(l) && !retried.has(`${dlqTopic}:${l.id}`);
  const listed = new Set(topic.map((l) => l.id));
  const standIn = standIns([...topic, ...letters.filter((l) => !listed.has(l.id))].filter(sendable));
  const send: DeadLetter[] = [];
  const refused: ReplayResult[] = [];
  for (const letter of letters) {
    const by = standIn.get(letter.id);
    if (!letter.source) refused.push({ id: letter.id, ok: false, reason: 'no usable dlq-source-topic, -partition and -offset headers: not written by a labelflow consumer' });
    else if (unreadable(letter)) refused.push({ id: letter.id, ok: false, skipped: true, reason: `${letter.code}: its bytes are not an event, and a replay would fail the same way in every consumer of ${letter.source.topic}` });
    else if (retried.has(`${dlqTopic}:${letter.id}`)) refused.push({ id: letter.id, ok: false, skipped: true, reason: 'replayed before and dead-lettered again: the newer letter stands for it' });
    else if (by && by.id !== letter.id) refused.push({ id: letter.id, ok: false, skipped: true, reason: `the newer letter ${by.id} carries the same message from ${letter.source.topic} and stands for it: a replay sends each message once` });
    else send.push(letter);
  }
  return { send, refused };
}

/**
 * Publishes each dead letter's original message (key, value, headers) to the topic it came from, so
 * the consumer that gave up on it applies it now (after a fix). Safe to repeat: the consumer's
 * exactly-once gate drops a message it already applied. A letter stored without its value (too
 * large for the dead-letter topic) is replayed from its source coordinates while the broker keeps
 * them. A letter that cannot be sent is reported and the others are still tried: the results say
 * which went out.
 */
export async function replayDeadLetters(kafka: Kafka, dlqTopic: string, letters: readonly DeadLetter[], topic: readonly DeadLetter[] = letters): Promise<ReplayResult[]> {
  const { send, refused } = planReplay(dlqTopic, letters, topic);
  const results: ReplayResult[] = [...refused];
  if (send.length === 0) return results;
  const producer = kafka.producer({ idempotent: true, maxInFlightRequests: 1, allowAutoTopicCreation: false });
  await producer.connect();
  try {
    for (const letter of send) {
      const source = letter.source!;
      try {
        let { value, key, headers } = letter;
        if (letter.valueOmitted) {
          const [original] = await readTopic(kafka, source.topic, { partition: source.partition, fromOffset: source.offset, limit: 1 });
          if (!original || original.message.offset !== source.offset) {
            results.push({ id: letter.id, ok: false, reason: `its value was omitted and ${source.topic} ${source.partition}:${source.offset} is no longer retained` });
            continue;
          }
          value = original.message.value;
          key = original.message.key?.toString() ?? null;
          headers = headerStrings(original.message.headers);
        }
        await producer.send({
          topic: source.topic,
          acks: -1,
          messages: [{ key, value, headers: { ...headers, [REPLAYED_FROM_HEADER]: `${dlqTopic}:${letter.id}` } }],
        });
        results.push({ id: letter.id, ok: true, topic: source.topic });
      } catch (error) {
        results.push({ id: letter.id, ok: false, reason: `not sent: ${(error as Error).message}` });
      }
    }
    return results;
  } finally {
    await producer.disconnect();
  }
}
