import { Kafka, logLevel, type Admin, type ITopicConfig, type LogEntry, type SASLOptions } from 'kafkajs';
import type { Logger } from '@labelflow/telemetry';
import { fixKafkajsIdleLoop, KafkajsIdleLoopFix, KAFKAJS_FIXED_VERSION } from './kafkajs-idle-loop';

export type { Kafka } from 'kafkajs';

const levels: Record<number, 'error' | 'warn' | 'info' | 'debug'> = {
  [logLevel.ERROR]: 'error',
  [logLevel.WARN]: 'warn',
  [logLevel.INFO]: 'info',
  [logLevel.DEBUG]: 'debug',
};

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
    ssl,
    ...(sasl ? { sasl: saslOptions(sasl) } : {}),
    connectionTimeout: 3_000,
    requestTimeout: 30_000,
    retry: { initialRetryTime: 200, retries: 8, maxRetryTime: 5_000 },
    logLevel: logLevel.WARN,
    logCreator: () => (entry: LogEntry) => {
      const { message, ...extra } = entry.log;
      log[levels[entry.level] ?? 'info']({ ...extra, namespace: entry.namespace }, message);
    },
  });
}

/** Creates missing topics; existing ones are left as they are. */
export async function ensureTopics(kafka: Kafka, topics: readonly string[], numPartitions: number): Promise<void> {
  const admin: Admin = kafka.admin();
  await admin.connect();
  try {
    const existing = new Set(await admin.listTopics());
    const missing: ITopicConfig[] = topics.filter((t) => !existing.has(t)).map((topic) => ({ topic, numPartitions, replicationFactor: 1 }));
    if (missing.length > 0) await admin.createTopics({ topics: missing, waitForLeaders: true });
  } finally {
    await admin.disconnect();
  }
}

/** Answers when a broker serves metadata requests; used by readiness probes. */
export async function pingKafka(admin: Admin): Promise<void> {
  await admin.describeCluster();
}
