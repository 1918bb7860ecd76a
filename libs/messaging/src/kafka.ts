import { Kafka, logLevel, type Admin, type ITopicConfig, type LogEntry, type SASLOptions } from 'kafkajs';
import type { Logger } from '@labelflow/telemetry';
import { MessagingError, MessagingErrors } from './errors';
import { fixKafkajsIdleLoop, KafkajsIdleLoopFix, KAFKAJS_FIXED_VERSION } from './kafkajs-idle-loop';

export type { Kafka } from 'kafkajs';

const levels: Record<number, 'error' | 'warn' | 'info' | 'debug'> = {
  [logLevel.ERROR]: 'error',
  [logLevel.WARN]: 'warn',
  [logLevel.INFO]: 'info',
  [logLevel.DEBUG]: 'debug',
};

/**
 * Answers a broker gives while a topic or group settles (just created, a leader moving, a
 * coordinator loading, a rebalance, a member dropped): kafkajs logs every error answer at ERROR in its Connection
 * namespace before it, or our topic wait, retries it. Whatever finally fails is logged by the
 * caller; the answers themselves are logged at debug, so a fresh start prints no error.
 */
const RETRIED_ANSWERS = new Set([
  'This server does not host this topic-partition',
  'There is no leader for this topic-partition as we are in the middle of a leadership election',
  'This server is not the leader for that topic-partition',
  'This is not the correct coordinator for this group',
  'The coordinator is loading and hence can\'t process requests for this group',
  'The group coordinator is not available',
  'The group is rebalancing, so a rejoin is needed',
  // A member the group dropped (a frozen or partitioned process coming back): kafkajs rejoins and
  // says so at warn ("re-joining the group"); the loop commits what it had once it is back.
  'The coordinator is not aware of this member',
  'Specified group generation id is not valid',
]);

/**
 * Printed by every idempotent kafkajs producer created with `retries` below infinity, which
 * `createKafka` sets on purpose (8): an endless retry would hold a close while Kafka is away. A
 * send that runs out of retries fails, and its batch is retried by the consumer loop. Not news at
 * every start.
 */
const LIMITED_RETRIES = 'Limiting retries for the idempotent producer may invalidate EoS guarantees';

/** The level a kafkajs log entry is written at. */
export function kafkajsLevel(entry: Pick<LogEntry, 'level' | 'namespace'> & { readonly log: { readonly message: string; readonly error?: unknown } }): 'error' | 'warn' | 'info' | 'debug' {
  const { message, error } = entry.log;
  if (entry.namespace === 'Connection' && message.startsWith('Response ') && typeof error === 'string' && RETRIED_ANSWERS.has(error)) return 'debug';
  if (entry.namespace === 'Producer' && message === LIMITED_RETRIES) return 'debug';
  return levels[entry.level] ?? 'info';
}

/** SASL mechanisms a client can authenticate with (the compose broker takes SCRAM-SHA-512). */
export const KafkaSaslMechanisms = ['plain', 'scram-sha-256', 'scram-sha-512'] as const;
export type KafkaSaslMechanism = (typeof KafkaSaslMechanisms)[number];

export interface KafkaSasl {
  readonly mechanism: KafkaSaslMechanism;
  readonly username: string;
  readonly password: string;
}

export interface KafkaDeps {
  readonly brokers: readonly string[];
  readonly clientId: string;
  readonly logger: Logger;
  /** Authenticates every connection; without it the client speaks to an unauthenticated listener. */
  readonly sasl?: KafkaSasl;
  /** TLS to the brokers with the system's trusted CAs. */
  readonly ssl?: boolean;
}

/** kafkajs takes one object type per mechanism; the three here share their shape. */
const saslOptions = ({ mechanism, username, password }: KafkaSasl): SASLOptions => {
  switch (mechanism) {
    case 'plain':
      return { mechanism, username, password };
    case 'scram-sha-256':
      return { mechanism, username, password };
    case 'scram-sha-512':
      return { mechanism, username, password };
  }
};

/** How a client logs in to the brokers: a SASL login, TLS, both or neither. */
export interface KafkaSecurity {
  readonly sasl?: KafkaSasl;
  readonly ssl?: boolean;
}

/** kafkajs's connection options for a login, to spread into `new Kafka({ ... })`. */
export const kafkajsSecurity = ({ sasl, ssl = false }: KafkaSecurity = {}): { ssl: boolean; sasl?: SASLOptions } => ({ ssl, ...(sasl ? { sasl: saslOptions(sasl) } : {}) });

/**
 * The login the services' variables describe (`KAFKA_SASL_MECHANISM`, `KAFKA_SASL_USERNAME`,
 * `KAFKA_SASL_PASSWORD`: all three or none; `KAFKA_SSL=1`), for a client made outside a service's
 * checked config: a tool run against the compose broker, which takes only SCRAM logins. Throws
 * CONFIG_INVALID on a partial login, an unknown mechanism or a `KAFKA_SSL` other than 0 or 1.
 */
export function kafkaSecurityFromEnv(env: Readonly<Record<string, string | undefined>> = process.env): KafkaSecurity {
  const { KAFKA_SASL_MECHANISM: mechanism, KAFKA_SASL_USERNAME: username, KAFKA_SASL_PASSWORD: password, KAFKA_SSL: sslFlag = '0' } = env;
  const problems: string[] = [];
  if (sslFlag !== '0' && sslFlag !== '1') problems.push(`KAFKA_SSL must be 0 or 1, got ${JSON.stringify(sslFlag)}`);
  const given = [mechanism, username, password].filter((v) => v !== undefined && v !== '').length;
  if (given > 0 && given < 3) problems.push('KAFKA_SASL_MECHANISM, KAFKA_SASL_USERNAME and KAFKA_SASL_PASSWORD go together: set all three or none');
  if (mechanism && !(KafkaSaslMechanisms as readonly string[]).includes(mechanism)) problems.push(`KAFKA_SASL_MECHANISM must be one of ${KafkaSaslMechanisms.join(', ')}, got ${JSON.stringify(mechanism)}`);
  if (problems.length > 0) throw new MessagingError(MessagingErrors.CONFIG_INVALID, problems.join('; '));
  const ssl = sslFlag === '1';
  return mechanism && username && password ? { sasl: { mechanism: mechanism as KafkaSaslMechanism, username, password }, ssl } : { ssl };
}

/**
 * A kafkajs client whose logs go through the service's logger instead of the console, with the
 * request queue's idle timer loop fixed (`fixKafkajsIdleLoop`).
 */
export function createKafka({ brokers, clientId, logger, sasl, ssl = false }: KafkaDeps): Kafka {
  const log = logger.child({ component: 'kafkajs' });
  if (fixKafkajsIdleLoop() !== KafkajsIdleLoopFix.applied) log.warn({ expected: KAFKAJS_FIXED_VERSION }, 'kafkajs is not the version its idle request-queue fix was written for; left unfixed');
  return new Kafka({
    clientId,
    brokers: [...brokers],
    ...kafkajsSecurity({ ssl, ...(sasl ? { sasl } : {}) }),
    connectionTimeout: 3_000,
    requestTimeout: 30_000,
    retry: { initialRetryTime: 200, retries: 8, maxRetryTime: 5_000 },
    logLevel: logLevel.WARN,
    logCreator: () => (entry: LogEntry) => {
      const { message, ...extra } = entry.log;
      log[kafkajsLevel(entry)]({ ...extra, namespace: entry.namespace }, message);
    },
  });
}

/**
 * Broker answers that mean "created, but not served yet". A KRaft broker applies the controller's
 * metadata records asynchronously: for a moment after CreateTopics it answers Metadata for the new
 * topic with UNKNOWN_TOPIC_OR_PARTITION, and once its metadata names itself the leader, a
 * partition it has not yet taken over answers NOT_LEADER_FOR_PARTITION. kafkajs's own
 * `waitForLeaders` retries only LEADER_NOT_AVAILABLE, so a loaded broker made a service fail at
 * start, and a test's offsets request fail right after.
 */
const TOPIC_NOT_YET_SERVED: ReadonlySet<string> = new Set(['UNKNOWN_TOPIC_OR_PARTITION', 'LEADER_NOT_AVAILABLE', 'NOT_LEADER_FOR_PARTITION']);
const notYetServed = (error: unknown): boolean => TOPIC_NOT_YET_SERVED.has((error as { type?: string }).type ?? '');

export interface EnsureTopicsOptions {
  /** How long the broker may take to serve every topic with a leader before the start fails. */
  readonly timeoutMs?: number;
  readonly pollMs?: number;
  /**
   * Topic-level settings a topic is created with (e.g. `retention.ms`), by topic name; the
   * broker's defaults otherwise. An existing topic is left as it is.
   */
  readonly configs?: Readonly<Record<string, Readonly<Record<string, string>>>>;
  /** Copies of each partition of a topic it creates (default 1: a single broker). */
  readonly replicationFactor?: number;
}

/**
 * Creates missing topics (existing ones are left as they are) and waits until each is served,
 * so consumers and producers started next find them.
 */
export async function ensureTopics(kafka: Kafka, topics: readonly string[], numPartitions: number, options: EnsureTopicsOptions = {}): Promise<void> {
  const admin: Admin = kafka.admin();
  await admin.connect();
  try {
    const existing = new Set(await admin.listTopics());
    const missing: ITopicConfig[] = topics
      .filter((t) => !existing.has(t))
      .map((topic) => {
        const configs = options.configs?.[topic];
        return { topic, numPartitions, replicationFactor: options.replicationFactor ?? 1, ...(configs ? { configEntries: Object.entries(configs).map(([name, value]) => ({ name, value })) } : {}) };
      });
    // kafkajs answers false, not an error, when another instance created them all meanwhile.
    if (missing.length > 0) await admin.createTopics({ topics: missing, waitForLeaders: false });
    // Every topic, not only the new ones: another instance may have created some a moment ago.
    await waitForTopicLeaders(admin, topics, options);
  } finally {
    await admin.disconnect();
  }
}

/**
 * `admin.createTopics` that resolves only once the broker serves every new topic with a leader on
 * each partition. Several services start at once and create the same topics: kafkajs answers
 * false, not an error, when every one of them exists already.
 */
export async function createServedTopics(admin: Admin, topics: readonly ITopicConfig[], options: EnsureTopicsOptions = {}): Promise<void> {
  if (topics.length === 0) return;
  await admin.createTopics({ topics: [...topics], waitForLeaders: false });
  await waitForTopicLeaders(admin, topics.map((t) => t.topic), options);
}

/**
 * Resolves once every topic is served: a leader named for each partition in the metadata, and the
 * leader answering a ListOffsets for all of them (it is the request that showed a partition not yet
 * taken over). Retries only "not yet" answers.
 */
export async function waitForTopicLeaders(admin: Admin, topics: readonly string[], { timeoutMs = 30_000, pollMs = 100 }: EnsureTopicsOptions = {}): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const pending = await topicsWithoutLeaders(admin, topics);
    if (pending.length === 0) return;
    if (Date.now() >= deadline) {
      throw new MessagingError(MessagingErrors.TOPICS_NOT_SERVED, `topics not served with a leader after ${timeoutMs} ms: ${pending.join(', ')}`, { retriable: true, details: { pending } });
    }
    await new Promise((resolve) => setTimeout(resolve, pollMs));
  }
}

const topicsWithoutLeaders = async (admin: Admin, topics: readonly string[]): Promise<readonly string[]> => {
  let named: string[];
  try {
    const { topics: served } = await admin.fetchTopicMetadata({ topics: [...topics] });
    named = served.filter((t) => t.partitions.length > 0 && t.partitions.every((p) => p.leader >= 0)).map((t) => t.name);
  } catch (error) {
    if (notYetServed(error)) return topics;
    throw error;
  }
  const answering = await Promise.all(
    named.map((topic) =>
      admin.fetchTopicOffsets(topic).then(
        () => topic,
        (error: unknown) => {
          if (notYetServed(error)) return undefined;
          throw error;
        },
      ),
    ),
  );
  const ready = new Set(answering.filter((t) => t !== undefined));
  return topics.filter((t) => !ready.has(t));
};

/** Answers when a broker serves metadata requests; used by readiness probes. */
export async function pingKafka(admin: Admin): Promise<void> {
  await admin.describeCluster();
}
