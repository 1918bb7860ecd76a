import { Producer, stringSerializers, type MessageToProduce, type SASLOptions } from '@platformatic/kafka';
import { MessagingError, MessagingErrors } from './errors';
import type { KafkaSasl, KafkaSaslMechanism } from './kafka';
import { murmur2 } from './partitioner';

export interface OutgoingMessage {
  readonly topic: string;
  readonly key: string;
  readonly value: string;
  readonly headers: Readonly<Record<string, string>>;
}

/** Structurally an outbox `Publisher`, without messaging depending on the outbox lib. */
export interface KafkaPublisher {
  /** Resolves once the broker acknowledged every message; rejects with a `PublishError`. */
  send(messages: readonly OutgoingMessage[]): Promise<void>;
  /** Fetches the cluster's metadata: a broker that cannot be reached, or refuses the login, fails here. */
  connect(): Promise<void>;
  disconnect(): Promise<void>;
}

export interface PublisherDeps {
  readonly brokers: readonly string[];
  readonly clientId: string;
  /** Authenticates every connection; without it the client speaks to an unauthenticated listener. */
  readonly sasl?: KafkaSasl;
  /** TLS to the brokers with the system's trusted CAs. */
  readonly ssl?: boolean;
  /**
   * Attempts of a request after the first before a send fails (the relay then backs off and reads
   * again). Default 8, at least 2: @platformatic/kafka reads 0 and 1 as "forever" for an idempotent
   * producer, and a send that never fails would hold the relay's close() while Kafka is away.
   */
  readonly retries?: number;
}

/**
 * A send the broker or the network refused. `type` is Kafka's name for the broker's answer
 * (`MESSAGE_TOO_LARGE`, `NOT_LEADER_OR_FOLLOWER`, …) when it gave one: the outbox relay parks a
 * row on `MESSAGE_TOO_LARGE` and `RECORD_LIST_TOO_LARGE`.
 */
export class PublishError extends MessagingError {
  readonly type: string | undefined;

  constructor(message: string, options: { readonly type: string | undefined; readonly cause: unknown }) {
    super(MessagingErrors.PUBLISH_FAILED, message, { cause: options.cause, retriable: true });
    this.type = options.type;
  }
}

const mechanisms: Record<KafkaSaslMechanism, SASLOptions['mechanism']> = { plain: 'PLAIN', 'scram-sha-256': 'SCRAM-SHA-256', 'scram-sha-512': 'SCRAM-SHA-512' };

/** A SASL login as @platformatic/kafka's clients take it. */
export const platformaticSasl = (sasl: KafkaSasl): SASLOptions => ({ mechanism: mechanisms[sasl.mechanism], username: sasl.username, password: sasl.password });

/** The Java client's partition for a key, as KeyPartitioner gives kafkajs: the producer takes it modulo the topic's partitions. */
const byKey = (_message: unknown, key: Buffer | undefined): number => (key ? murmur2(key) & 0x7fffffff : 0);

/** The first broker error name in an error from @platformatic/kafka, which nests them (a response's per-partition errors, a retry's attempts). */
function brokerErrorOf(error: unknown, depth = 0): string | undefined {
  if (typeof error !== 'object' || error === null || depth > 6) return undefined;
  const e = error as { apiId?: unknown; errors?: unknown; cause?: unknown };
  if (typeof e.apiId === 'string') return e.apiId;
  for (const inner of Array.isArray(e.errors) ? e.errors : []) {
    const found = brokerErrorOf(inner, depth + 1);
    if (found) return found;
  }
  return brokerErrorOf(e.cause, depth + 1);
}

/**
 * An idempotent producer (acks=all, one request in flight per broker): broker-side retries never
 * duplicate or reorder a partition's messages. Duplicates from a relay crash are the consumers'
 * dedup's job. Built on @platformatic/kafka, whose record encoding costs less than half of kafkajs's
 * CPU per message (the README's `createPublisher` section); consumers stay on kafkajs.
 *
 * After a failed send the producer is replaced by a new one (a new producer id) before the next
 * send. A produce request that fails for one partition (one refused as MESSAGE_TOO_LARGE, the others
 * written) leaves the sequence numbers of the written partitions behind the broker's, which would
 * then take the next batch to them for a duplicate and drop it (the int spec shows it) or refuse
 * later ones as OUT_OF_ORDER_SEQUENCE_NUMBER. A new producer id
 * starts every sequence afresh; what it sends again that was written before is a duplicate, which
 * consumers dedup. Sends are expected one at a time, as the outbox relay makes them.
 */
export function createPublisher(deps: PublisherDeps): KafkaPublisher {
  const { sasl, ssl = false } = deps;
  const retries = Math.max(2, Math.floor(deps.retries ?? 8));
  const make = () =>
    new Producer<string, string, string, string>({
      clientId: deps.clientId,
      bootstrapBrokers: [...deps.brokers],
      serializers: stringSerializers,
      idempotent: true,
      autocreateTopics: false,
      partitioner: byKey,
      connectTimeout: 3_000,
      requestTimeout: 30_000,
      retries,
      retryDelay: (_client, _operation, attempt) => Math.min(200 * 2 ** attempt, 5_000),
      ...(sasl ? { sasl: platformaticSasl(sasl) } : {}),
      ...(ssl ? { tls: {} } : {}),
    });
  let producer = make();
  let stale = false;
  const refused = (what: string, error: unknown): PublishError => {
    const type = brokerErrorOf(error);
    return new PublishError(`${what}: ${type ?? (error as Error).message}`, { type, cause: error });
  };
  return {
    async connect() {
      try {
        await producer.metadata({ topics: [] });
      } catch (error) {
        throw refused(`Kafka at ${deps.brokers.join(',')} refused the connection or did not answer`, error);
      }
    },
    disconnect: () => producer.close(),
    async send(messages: readonly OutgoingMessage[]) {
      if (messages.length === 0) return;
      if (stale) {
        const old = producer;
        producer = make();
        stale = false;
        await old.close().catch(() => undefined);
      }
      const batch: MessageToProduce<string, string, string, string>[] = new Array(messages.length);
      for (let i = 0; i < messages.length; i++) {
        const m = messages[i] as OutgoingMessage;
        batch[i] = { topic: m.topic, key: m.key, value: m.value, headers: m.headers as Record<string, string> };
      }
      try {
        await producer.send({ messages: batch });
      } catch (error) {
        stale = true;
        throw refused(`publishing ${messages.length} messages failed`, error);
      }
    },
  };
}
