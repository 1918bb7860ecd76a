import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, openSync, readFileSync, rmSync, closeSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { promisify } from 'node:util';
import { Kafka as KafkaJs, logLevel } from 'kafkajs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { captureLogs, repoRoot, sparePort, uniqueName } from '@labelflow/testing';
import { createKafka, createPublisher, ensureTopics, PublishError, type Kafka, type KafkaSasl } from './index';

const run = promisify(execFile);

/**
 * A private broker started by infra/kafka/start-sasl.sh, the compose Kafka's entrypoint, from the
 * jars infra/local/kafka.sh installs: SASL_PLAINTEXT/SCRAM-SHA-512 only, on spare loopback ports.
 */
describe('Kafka with SASL/SCRAM-SHA-512 (infra/kafka/start-sasl.sh)', () => {
  const password = randomBytes(24).toString('hex');
  const workerPassword = randomBytes(24).toString('hex');
  /** The input topic model workers may write, and nothing else. */
  const prelabelTopic = uniqueName('sasl-prelabels');
  const dir = mkdtempSync(join(tmpdir(), 'lf-kafka-sasl-'));
  const logFile = join(dir, 'broker.log');
  const { logger } = captureLogs({ service: 'sasl-test', level: 'error' });
  let broker: ChildProcess | undefined;
  let brokers: string[] = [];
  const client = (sasl?: KafkaSasl): Kafka => createKafka({ brokers, clientId: uniqueName('sasl-test'), logger, ...(sasl ? { sasl } : {}) });
  const good = (): KafkaSasl => ({ mechanism: 'scram-sha-512', username: 'labelflow', password });
  const brokerLog = () => {
    try {
      return readFileSync(logFile, 'utf8').split('\n').slice(-40).join('\n');
    } catch {
      return '(no broker log)';
    }
  };

  beforeAll(async () => {
    // Reuses the installed jars (downloads only if infra/local/kafka.sh never ran here).
    await run('bash', [join(repoRoot, 'infra/local/kafka.sh'), 'install'], { timeout: 10 * 60_000 });
    const libs = process.env.KAFKA_LIBS ?? join(process.env.LABELFLOW_LOCAL_DIR ?? join(repoRoot, '.local'), 'kafka/libs');
    const [port, controllerPort] = [await sparePort(), await sparePort()];
    brokers = [`127.0.0.1:${port}`];
    const out = openSync(logFile, 'a');
    broker = spawn('bash', [join(repoRoot, 'infra/kafka/start-sasl.sh')], {
      env: {
        PATH: process.env.PATH,
        HOME: process.env.HOME,
        KAFKA_HOME: dirname(libs),
        KAFKA_LIBS: libs,
        KAFKA_LAUNCHER: 'java',
        KAFKA_DATA_DIR: join(dir, 'data'),
        KAFKA_CONFIG_DIR: join(dir, 'config'),
        KAFKA_LISTEN_HOST: '127.0.0.1',
        KAFKA_ADVERTISED_HOST: '127.0.0.1',
        KAFKA_SASL_PORT: String(port),
        KAFKA_CONTROLLER_PORT: String(controllerPort),
        KAFKA_SASL_USERNAME: 'labelflow',
        KAFKA_SASL_PASSWORD: password,
        KAFKA_PRELABEL_USERNAME: 'model-worker',
        KAFKA_PRELABEL_PASSWORD: workerPassword,
        KAFKA_PRELABEL_TOPIC: prelabelTopic,
        KAFKA_HEAP_OPTS: '-Xms128m -Xmx384m',
      },
      stdio: ['ignore', out, out],
    });
    closeSync(out);
    let exited: string | undefined;
    broker.on('exit', (code, signal) => (exited = `exit code ${code} signal ${signal}`));

    // Ready once an authenticated admin request is served.
    const deadline = Date.now() + 90_000;
    for (;;) {
      if (exited) throw new Error(`start-sasl.sh ended (${exited}) before the broker answered:\n${brokerLog()}`);
      const admin = client(good()).admin();
      try {
        await admin.connect();
        await admin.describeCluster();
        return;
      } catch (error) {
        if (Date.now() > deadline) throw new Error(`broker on ${brokers[0]} not ready in 90 s: ${(error as Error).message}\n${brokerLog()}`);
      } finally {
        await admin.disconnect().catch(() => undefined);
      }
      await new Promise((resolve) => setTimeout(resolve, 500));
    }
  });

  afterAll(async () => {
    // start-sasl.sh execs java: this pid is the broker's.
    if (broker?.pid !== undefined && broker.exitCode === null && broker.signalCode === null) {
      const gone = new Promise((resolve) => broker?.once('exit', resolve));
      broker.kill('SIGTERM');
      const timer = setTimeout(() => broker?.kill('SIGKILL'), 30_000);
      await gone;
      clearTimeout(timer);
    }
    rmSync(dir, { recursive: true, force: true });
  });

  it('lets a client with the right SCRAM credentials create a topic, produce and consume a message', async () => {
    const kafka = client(good());
    const topic = uniqueName('sasl-topic');
    await ensureTopics(kafka, [topic], 1);

    const producer = kafka.producer({ allowAutoTopicCreation: false });
    await producer.connect();
    await producer.send({ topic, acks: -1, messages: [{ key: 'k', value: 'hello over SCRAM' }] });
    await producer.disconnect();

    const consumer = kafka.consumer({ groupId: uniqueName('sasl-group') });
    await consumer.connect();
    try {
      await consumer.subscribe({ topic, fromBeginning: true });
      const value = await new Promise<string>((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error('no message consumed in 30 s')), 30_000);
        void consumer.run({
          eachMessage: async ({ message }) => {
            clearTimeout(timer);
            resolve(message.value?.toString() ?? '');
          },
        });
      });
      expect(value).toBe('hello over SCRAM');
    } finally {
      await consumer.disconnect();
    }
  });

  it('lets the outbox publisher (createPublisher) log in with SCRAM and publish, and refuses it at connect with a wrong password', async () => {
    const kafka = client(good());
    const topic = uniqueName('sasl-publish');
    await ensureTopics(kafka, [topic], 1);
    const publisher = createPublisher({ brokers, clientId: uniqueName('sasl-publisher'), sasl: good() });
    try {
      await publisher.connect();
      await publisher.send([{ topic, key: 'k', value: 'published over SCRAM', headers: { 'event-type': 'Test' } }]);
    } finally {
      await publisher.disconnect();
    }
    const admin = kafka.admin();
    await admin.connect();
    try {
      expect((await admin.fetchTopicOffsets(topic)).map((p) => p.high)).toEqual(['1']);
    } finally {
      await admin.disconnect();
    }

    const refused = createPublisher({ brokers, clientId: uniqueName('sasl-publisher'), sasl: { ...good(), password: `${password}-wrong` }, retries: 2 });
    try {
      const error = await refused.connect().then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(error).toBeInstanceOf(PublishError);
    } finally {
      await refused.disconnect();
    }
  });

  it('lets the model workers\' user write the pre-label topic and nothing else: no other topic, no reading, no topic creation', async () => {
    const services = client(good());
    const other = uniqueName('sasl-task-events');
    await ensureTopics(services, [prelabelTopic, other], 1);
    const worker = new KafkaJs({ clientId: uniqueName('sasl-worker'), brokers, logLevel: logLevel.NOTHING, retry: { retries: 2, initialRetryTime: 100 }, sasl: { mechanism: 'scram-sha-512', username: 'model-worker', password: workerPassword } });
    const producer = worker.producer({ allowAutoTopicCreation: false });
    await producer.connect();
    try {
      // The grant is added once the broker answers, in the background of its start: wait for it.
      const deadline = Date.now() + 60_000;
      for (;;) {
        const sent: Error | undefined = await producer.send({ topic: prelabelTopic, acks: -1, messages: [{ key: 't-1', value: '{"proposal":1}' }] }).then(() => undefined, (e: Error) => e);
        if (sent === undefined) break;
        if (Date.now() > deadline) throw new Error(`the worker could not write ${prelabelTopic} within 60 s: ${sent.message}\n${brokerLog()}`);
        await new Promise((resolve) => setTimeout(resolve, 500));
      }
      const refused = await producer.send({ topic: other, acks: -1, messages: [{ key: 't-1', value: 'forged' }] }).then(() => undefined, (e: Error) => e);
      expect(refused?.message ?? 'written', 'the worker wrote a services\' topic').toMatch(/not authorized|authorization/i);
    } finally {
      await producer.disconnect();
    }
    // Nor read: without a group of its own to join, its consumer stops before fetching anything.
    const consumer = worker.consumer({ groupId: uniqueName('sasl-worker-group'), retry: { retries: 0 } });
    const read: string[] = [];
    const crashed = new Promise<Error>((resolve) => consumer.on(consumer.events.CRASH, ({ payload }) => resolve(payload.error)));
    await consumer.connect();
    try {
      await consumer.subscribe({ topic: prelabelTopic, fromBeginning: true });
      await consumer.run({ eachMessage: async ({ message }) => void read.push(String(message.value)) });
      expect((await crashed).name).toMatch(/^KafkaJS/);
      expect(read).toEqual([]);
    } finally {
      await consumer.disconnect().catch(() => undefined);
    }
    const workerAdmin = worker.admin();
    await workerAdmin.connect();
    try {
      const created = await workerAdmin.createTopics({ topics: [{ topic: uniqueName('sasl-worker-topic') }] }).then(() => undefined, (e: Error & { errors?: { type?: string }[] }) => e);
      expect(created?.errors?.map((e) => e.type), 'the worker created a topic').toEqual(['TOPIC_AUTHORIZATION_FAILED']);
    } finally {
      await workerAdmin.disconnect();
    }
    const admin = services.admin();
    await admin.connect();
    try {
      expect((await admin.fetchTopicOffsets(other)).map((p) => p.high)).toEqual(['0']);
      expect((await admin.fetchTopicOffsets(prelabelTopic)).map((p) => p.high)).toEqual(['1']);
    } finally {
      await admin.disconnect();
    }
  });

  it('refuses a client with a wrong password with an authentication error', async () => {
    const admin = client({ ...good(), password: `${password}-wrong` }).admin();
    try {
      const error = await admin.connect().then(
        () => undefined,
        (e: Error) => e,
      );
      expect(error?.name).toBe('KafkaJSSASLAuthenticationError');
      expect(error?.message).toMatch(/SCRAM.*authentication failed|invalid credentials/i);
    } finally {
      await admin.disconnect().catch(() => undefined);
    }
  });

  it('serves no request to a client that does not authenticate', async () => {
    // Plain kafkajs without retries: the services' client would only retry the same refusal longer.
    const admin = new KafkaJs({ clientId: uniqueName('sasl-test'), brokers, logLevel: logLevel.NOTHING, connectionTimeout: 3_000, requestTimeout: 5_000, retry: { retries: 0 } }).admin();
    try {
      const error = await admin
        .connect()
        .then(() => admin.listTopics())
        .then(
          () => undefined,
          (e: Error) => e,
        );
      // The broker closes the connection of a client that skips the SASL handshake.
      expect(error?.name, 'an unauthenticated client listed the topics').toMatch(/^KafkaJSConnection(Closed)?Error$/);
    } finally {
      await admin.disconnect().catch(() => undefined);
    }
  });

  it('refuses a client of an unknown user with an authentication error', async () => {
    const admin = client({ ...good(), username: 'intruder' }).admin();
    try {
      const error = await admin.connect().then(
        () => undefined,
        (e: Error) => e,
      );
      expect(error?.name).toBe('KafkaJSSASLAuthenticationError');
    } finally {
      await admin.disconnect().catch(() => undefined);
    }
  });
});
