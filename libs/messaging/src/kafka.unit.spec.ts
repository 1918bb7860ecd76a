import { logLevel, type Admin, type PartitionMetadata } from 'kafkajs';
import { describe, expect, it } from 'vitest';
import { MessagingErrors } from './errors';
import { createServedTopics, kafkajsLevel, kafkajsSecurity, kafkaSecurityFromEnv, waitForTopicLeaders } from './kafka';

type MetadataAnswer = Readonly<Record<string, readonly number[]>> | { readonly type: string; readonly message: string };

const partition = (partitionId: number, leader: number): PartitionMetadata => ({ partitionId, leader, replicas: [1], isr: [1], partitionErrorCode: 0, offlineReplicas: [] });

type Refusal = { readonly type: string; readonly message: string };

/**
 * A broker that answers each Metadata request with the next scripted answer, and each ListOffsets
 * with the next of `offsets` (undefined: answered); the last answer of each repeats.
 */
const scriptedAdmin = (answers: readonly MetadataAnswer[], offsets: readonly (Refusal | undefined)[] = [undefined]) => {
  const calls = { metadata: 0, offsets: 0, created: [] as unknown[] };
  const admin = {
    fetchTopicOffsets: async () => {
      const answer = offsets[Math.min(calls.offsets++, offsets.length - 1)];
      if (answer) throw Object.assign(new Error(answer.message), { type: answer.type });
      return [];
    },
    createTopics: async (request: unknown) => {
      calls.created.push(request);
      return true;
    },
    fetchTopicMetadata: async ({ topics }: { topics: string[] }) => {
      const answer = answers[Math.min(calls.metadata++, answers.length - 1)]!;
      if ('type' in answer) throw Object.assign(new Error(answer.message as string), { type: answer.type });
      const leaders = answer as Readonly<Record<string, readonly number[]>>;
      return { topics: topics.filter((t) => t in leaders).map((name) => ({ name, partitions: leaders[name]!.map((leader, i) => partition(i, leader)) })) };
    },
  };
  return { admin: admin as unknown as Admin, calls };
};

const notYet = { type: 'UNKNOWN_TOPIC_OR_PARTITION', message: 'This server does not host this topic-partition' };

describe('waiting for new topics to be served', () => {
  it('waits through the broker answering UNKNOWN_TOPIC_OR_PARTITION for a topic it has just created', async () => {
    const { admin, calls } = scriptedAdmin([notYet, notYet, { a: [1, 1], b: [1] }]);
    await waitForTopicLeaders(admin, ['a', 'b'], { pollMs: 1 });
    expect(calls.metadata).toBe(3);
  });

  it('waits until every partition of every topic has a leader', async () => {
    const { admin, calls } = scriptedAdmin([{ a: [1, -1] }, { a: [1, 1] }, { a: [1, 1], b: [1] }]);
    await waitForTopicLeaders(admin, ['a', 'b'], { pollMs: 1 });
    expect(calls.metadata).toBe(3);
  });

  it('waits until the named leader answers for the topic, through NOT_LEADER_FOR_PARTITION while it takes the partitions over', async () => {
    const notLeader = { type: 'NOT_LEADER_FOR_PARTITION', message: 'This server is not the leader for that topic-partition' };
    const { admin, calls } = scriptedAdmin([{ a: [1, 1, 1] }], [notLeader, notLeader, undefined]);
    await waitForTopicLeaders(admin, ['a'], { pollMs: 1 });
    expect(calls).toMatchObject({ metadata: 3, offsets: 3 });
  });

  it('fails at once on an answer that is not "not yet"', async () => {
    const { admin, calls } = scriptedAdmin([{ type: 'TOPIC_AUTHORIZATION_FAILED', message: 'Not authorized to access topics' }]);
    await expect(waitForTopicLeaders(admin, ['a'], { pollMs: 1 })).rejects.toThrow('Not authorized');
    expect(calls.metadata).toBe(1);
  });

  it('fails with TOPICS_NOT_SERVED naming the topics still without a leader when the time is up', async () => {
    const { admin } = scriptedAdmin([{ a: [1], b: [-1] }]);
    const error = await waitForTopicLeaders(admin, ['a', 'b'], { timeoutMs: 20, pollMs: 5 }).catch((e: unknown) => e);
    expect(error).toMatchObject({ code: MessagingErrors.TOPICS_NOT_SERVED, retriable: true, details: { pending: ['b'] } });
  });

  it('creates topics without kafkajs own wait and then waits for them itself', async () => {
    const { admin, calls } = scriptedAdmin([notYet, { a: [1, 1, 1] }]);
    await createServedTopics(admin, [{ topic: 'a', numPartitions: 3 }], { pollMs: 1 });
    expect(calls.created).toEqual([{ topics: [{ topic: 'a', numPartitions: 3 }], waitForLeaders: false }]);
    expect(calls.metadata).toBe(2);
  });

  it('asks nothing of the broker when there is no topic to create', async () => {
    const { admin, calls } = scriptedAdmin([notYet]);
    await createServedTopics(admin, []);
    expect(calls).toEqual({ metadata: 0, offsets: 0, created: [] });
  });
});

describe('the level of a kafkajs log line', () => {
  const response = (error: string, level = logLevel.ERROR) => ({ level, namespace: 'Connection', log: { message: 'Response ListOffsets(key: 2, version: 3)', error } });

  it('is debug for an answer kafkajs or the topic wait retries, as a topic or group settles', () => {
    expect(kafkajsLevel(response('This server is not the leader for that topic-partition'))).toBe('debug');
    expect(kafkajsLevel(response('This server does not host this topic-partition'))).toBe('debug');
    expect(kafkajsLevel(response('The group is rebalancing, so a rejoin is needed'))).toBe('debug');
  });

  it('stays as kafkajs logged it for any other answer or line', () => {
    expect(kafkajsLevel(response('Not authorized to access topics: [Topic authorization failed]'))).toBe('error');
    expect(kafkajsLevel({ level: logLevel.ERROR, namespace: 'Consumer', log: { message: 'Crash: KafkaJSNumberOfRetriesExceeded', error: 'This server is not the leader for that topic-partition' } })).toBe('error');
    expect(kafkajsLevel({ level: logLevel.WARN, namespace: 'Producer', log: { message: 'Producer disconnected while sending' } })).toBe('warn');
  });

  it('is debug for the idempotent producer\'s note on limited retries, which createKafka sets on purpose', () => {
    expect(kafkajsLevel({ level: logLevel.WARN, namespace: 'Producer', log: { message: 'Limiting retries for the idempotent producer may invalidate EoS guarantees' } })).toBe('debug');
  });
});

describe('a tool\'s broker login, read from the services\' variables', () => {
  it('is no login and no TLS when none of the variables is set', () => {
    expect(kafkaSecurityFromEnv({})).toEqual({ ssl: false });
    expect(kafkajsSecurity(kafkaSecurityFromEnv({}))).toEqual({ ssl: false });
  });

  it('is the SASL login the three variables give, with TLS when KAFKA_SSL is 1, in the shape kafkajs takes', () => {
    const env = { KAFKA_SASL_MECHANISM: 'scram-sha-512', KAFKA_SASL_USERNAME: 'labelflow', KAFKA_SASL_PASSWORD: 's3cret', KAFKA_SSL: '1' };
    expect(kafkaSecurityFromEnv(env)).toEqual({ sasl: { mechanism: 'scram-sha-512', username: 'labelflow', password: 's3cret' }, ssl: true });
    expect(kafkajsSecurity(kafkaSecurityFromEnv(env))).toEqual({ ssl: true, sasl: { mechanism: 'scram-sha-512', username: 'labelflow', password: 's3cret' } });
  });

  it('refuses a partial login, an unknown mechanism or a KAFKA_SSL other than 0 or 1, naming what is wrong', () => {
    const refused = (env: Record<string, string>) => {
      try {
        kafkaSecurityFromEnv(env);
      } catch (error) {
        expect(error).toMatchObject({ code: MessagingErrors.CONFIG_INVALID, retriable: false });
        return (error as Error).message;
      }
      throw new Error(`${JSON.stringify(env)} was accepted`);
    };
    expect(refused({ KAFKA_SASL_MECHANISM: 'scram-sha-512' })).toBe('KAFKA_SASL_MECHANISM, KAFKA_SASL_USERNAME and KAFKA_SASL_PASSWORD go together: set all three or none');
    expect(refused({ KAFKA_SASL_MECHANISM: 'gssapi', KAFKA_SASL_USERNAME: 'u', KAFKA_SASL_PASSWORD: 'p' })).toBe('KAFKA_SASL_MECHANISM must be one of plain, scram-sha-256, scram-sha-512, got "gssapi"');
    expect(refused({ KAFKA_SSL: 'yes' })).toBe('KAFKA_SSL must be 0 or 1, got "yes"');
  });
});
