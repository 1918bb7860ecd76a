// Consumer pipeline benchmark: events/s through ONE service's whole consumer pipeline, in process and
// with the real code — the consumer loop (createConsumerLoop) feeding the exactly-once shell
// (createExactlyOnce) with qa-svc's reviewConsumer (LabelSubmitted → opens a review, emits QaStarted
// into the outbox), the dedup gate on Redis (Bloom fallback), the emitter with Snowflake ids, on a
// database migrated with qa-svc's migrations — side by side in the same run with a raw kafkajs
// consumer (no-op eachBatch) reading the same messages from the same topic. Then the outbox relay's
// rows/s, publishing what each pipeline round left in the outbox.
//   npm run bench:pipeline -- --events 20000 --duplicates 0.3 --rounds 3 --partitions 6
// Env: KAFKA_BROKERS (default 127.0.0.1:9092), PG_URL (default postgres://postgres@127.0.0.1:5432/postgres),
// REDIS_URL (default redis://127.0.0.1:6379), LOG_LEVEL (default warn, to stderr).
// Works on fresh topics (deleted at the end), a fresh database per pipeline pass (dropped at the
// end), fresh consumer groups (deleted at the end) and its own Redis namespace (removed by SCAN +
// UNLINK at the end, never FLUSHDB; every key also carries a 10-minute TTL). Progress goes to
// stderr, the table to stdout. Exit code 0 whatever the targets say; 1 if the bench could not run
// or a pipeline round produced a wrong result (then its number means nothing).
import { execFileSync } from 'node:child_process';
import { createHash, randomUUID } from 'node:crypto';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Writable } from 'node:stream';
import { parseArgs } from 'node:util';
import { Redis } from 'ioredis';
import pg from 'pg';
import { Partitioners, type Admin, type Kafka } from 'kafkajs';
import { LabelSubmitted, TopicSchemas, topicName, typesOnTopicOf, type DomainEvent } from '@labelflow/contracts';
import { createDedupGate, inboxReader } from '@labelflow/dedup';
import { composeSnowflake } from '@labelflow/idgen';
import { createConsumerLoop, createKafka, createPublisher, createServedTopics, EVENT_TYPE_HEADER } from '@labelflow/messaging';
import { countPendingSql, createOutboxRelay } from '@labelflow/outbox';
import {
  createEmitter,
  createExactlyOnce,
  createIdSource,
  createPool,
  createLongPollQuota,
  createTaskSignals,
  deadLetterTopic,
  isTransientDbError,
  limitHeapGrowth,
  loadConfig,
  migrate,
  uuidIds,
  type ServiceContext,
} from '@labelflow/service-kit';
import { createLogger, createMetrics, installTracePropagation, type Logger, type Metrics } from '@labelflow/telemetry';
import { seededRandom } from '@labelflow/producer';
import { authEnv } from '@labelflow/testing';
import { QaSvcConfig } from '../apps/qa-svc/src/config';
import { migrations as qaMigrations } from '../apps/qa-svc/src/migrations';
import { reviewConsumer } from '../apps/qa-svc/src/reviews/reactions';
import { cpuFloor, describeFloor, fmtInfra, fmtRate, machineCpu, median, positiveInt, redactUrl, runBench, sleep, monoUs, timeConsumer, type Timed } from './common';
import { findInfra, infraMsBetween, infraTicks, type Infra, type InfraTargets } from './proc';

const { values: args } = parseArgs({
  options: {
    events: { type: 'string', default: '20000' },
    duplicates: { type: 'string', default: '0.3' },
    rounds: { type: 'string', default: '3' },
    partitions: { type: 'string', default: '6' },
    seed: { type: 'string', default: '1' },
    'timeout-s': { type: 'string', default: '120' },
    'relay-analyze': { type: 'boolean', default: false },
    help: { type: 'boolean', default: false },
  },
});
if (args.help) {
  console.log('npm run bench:pipeline -- [--events N=20000] [--duplicates 0.3] [--rounds R=3] [--partitions 6] [--seed 1] [--timeout-s 120]');
  process.exit(0);
}

/** Messages on the topic, duplicates included: what each contender must account for. */
const N = positiveInt('events', args.events);
const DUP_RATE = Number(args.duplicates);
if (!(DUP_RATE >= 0 && DUP_RATE < 1)) throw new Error(`--duplicates must be in [0, 1), got ${args.duplicates}`);
/** Every contender runs R times, interleaved: raw, pipeline (+ relay), raw, pipeline (+ relay), … */
const R = positiveInt('rounds', args.rounds);
const DUPLICATES = Math.round(N * DUP_RATE);
/** Distinct tasks: the reviews, QaStarted outbox rows and relay rows each pipeline round yields. */
const DISTINCT = N - DUPLICATES;
const P = positiveInt('partitions', args.partitions);
const SEED = positiveInt('seed', args.seed);
const TIMEOUT_MS = positiveInt('timeout-s', args['timeout-s']) * 1000;
const WARMUP = Math.min(2_000, Math.max(200, Math.floor(N / 10)));
const PIPELINE_TARGET = 0.35; // pipeline events/s ÷ raw events/s
const RELAY_TARGET = 1.5; // relay rows/s ÷ pipeline events/s
const BROKERS = (process.env.KAFKA_BROKERS ?? '127.0.0.1:9092').split(',');
const PG_URL = process.env.PG_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';
const REDIS_URL = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';
const LOG_LEVEL = process.env.LOG_LEVEL ?? 'warn';
const RUN_ID = `${Date.now().toString(36)}${randomUUID().slice(0, 6)}`;
const PREFIX = `lf-bench-pipeline-${RUN_ID}`;
const WARM_PREFIX = `${PREFIX}-warm`;
const NS = `lf:bench:pipeline:${RUN_ID}`;
const DB_PREFIX = `lf_bench_pipeline_${RUN_ID}`.toLowerCase();
const SERVICE = 'qa-svc';
/** What runtime.ts names the service's outbox NOTIFY channel. */
const CHANNEL = `outbox_${SERVICE.replace(/-/g, '_')}`;
const SIGNAL_CHANNEL = `signals_${SERVICE.replace(/-/g, '_')}`;
/** Every bench key expires by itself even if the cleanup never runs (DEDUP_REDIS_TTL_MS). */
const KEY_TTL_MS = 600_000;
const POLL_MS = 5;
/** Diagnostic: ANALYZE the outbox before the relay pass (planner statistics autovacuum has not gathered yet). */
const RELAY_ANALYZE = args['relay-analyze'] === true;

const progress = (line: string) => process.stderr.write(`${line}\n`);

// ---------------------------------------------------------------- workload


interface Workload {
  /** The messages in the order they go on the topic (duplicates are the same objects again). */
  readonly messages: readonly { key: string; value: Buffer; headers: Record<string, string> }[];
  /** The distinct tasks, one LabelSubmitted each. */
  readonly taskIds: readonly string[];
  readonly duplicates: number;
}

/**
 * `total` messages: `total - round(total × rate)` distinct LabelSubmitted events (one task each,
 * validated with the contracts' schema) and the rest exact re-sends of earlier ones, spread evenly
 * over the stream (each duplicate re-sends a random earlier event not re-sent yet). Task and event
 * ids are Snowflake ids as task-svc and label-svc would issue them; headers are what the emitter
 * stamps (trace context, event-type, event-version).
 */
function makeWorkload(total: number, rate: number, seed: number, timestampMs: number, taskWorker: number): Workload {
  const random = seededRandom(seed);
  const duplicates = Math.round(total * rate);
  const distinct = total - duplicates;
  const projectIds = Array.from({ length: 8 }, () => randomUUID());
  const originals = Array.from({ length: distinct }, (_, i) => {
    const ms = timestampMs + Math.floor(i / 4096);
    const taskId = composeSnowflake({ timestampMs: ms, workerId: taskWorker, sequence: i % 4096 });
    const eventId = composeSnowflake({ timestampMs: ms + 60_000, workerId: 256 + taskWorker, sequence: i % 4096 });
    const event = LabelSubmitted.parse({
      id: eventId,
      type: 'LabelSubmitted',
      version: 2,
      taskId,
      projectId: projectIds[i % projectIds.length],
      attempt: 1,
      occurredAt: new Date(ms + 60_000).toISOString(),
      producer: 'label-svc',
      causationId: `labels-${taskId}`,
      payload: { annotatorId: `ann-${i % 50}`, annotations: [{ label: i % 2 ? 'cat' : 'dog', confidence: 0.9 }], durationMs: null },
    });
    const trace = `00-${randomUUID().replace(/-/g, '')}-${randomUUID().replace(/-/g, '').slice(0, 16)}-01`;
    return { key: event.taskId, value: Buffer.from(JSON.stringify(event)), headers: { traceparent: trace, [EVENT_TYPE_HEADER]: event.type, 'event-version': String(event.version) } };
  });
  // Slots: which positions are duplicates, uniformly at random (the first is always an original).
  const kinds = new Uint8Array(total).fill(1, distinct); // 1 = a duplicate
  for (let i = kinds.length - 1; i > 0; i--) {
    const j = Math.floor(random() * (i + 1));
    const k = kinds[i] ?? 0;
    kinds[i] = kinds[j] ?? 0;
    kinds[j] = k;
  }
  if (kinds[0] === 1) {
    kinds[kinds.indexOf(0)] = 1;
    kinds[0] = 0;
  }
  const messages: Workload['messages'][number][] = [];
  const notResent: number[] = [];
  let next = 0;
  for (const isDuplicate of kinds) {
    // A duplicate re-sends a random earlier event not re-sent yet (any earlier one once all have been).
    const pick = isDuplicate === 0 ? next++ : notResent.length > 0 ? (notResent.splice(Math.floor(random() * notResent.length), 1)[0] ?? 0) : Math.floor(random() * next);
    if (isDuplicate === 0) notResent.push(pick);
    messages.push(at(originals, pick));
  }
  return { messages, taskIds: originals.map((o) => o.key), duplicates };
}

function at<T>(items: readonly T[], i: number): T {
  const item = items[i];
  if (item === undefined) throw new RangeError(`index ${i} out of ${items.length}`);
  return item;
}

async function produce(kafka: Kafka, topic: string, workload: Workload): Promise<void> {
  // Same producer settings as the services' publisher: idempotent, acks=all, default partitioner.
  const producer = kafka.producer({ idempotent: true, maxInFlightRequests: 1, allowAutoTopicCreation: false, createPartitioner: Partitioners.DefaultPartitioner });
  await producer.connect();
  try {
    for (let at = 0; at < workload.messages.length; at += 2_000) {
      await producer.send({ topic, acks: -1, messages: workload.messages.slice(at, at + 2_000) });
    }
  } finally {
    await producer.disconnect();
  }
}

// ---------------------------------------------------------------- measurement helpers

const fmtX = (n: number | null | undefined) => (n === null || n === undefined || !Number.isFinite(n) ? 'n/a' : `${n.toFixed(2)}x`);
/** CLOCK_MONOTONIC in µs: the clock of V8's .cpuprofile timestamps, so profiles can be cut to a window. */


// ---------------------------------------------------------------- contenders

interface Env {
  readonly kafka: Kafka;
  readonly admin: Admin;
  readonly pgAdmin: pg.Client;
  readonly logger: Logger;
  readonly redis: Redis;
  readonly createdDbs: string[];
  readonly createdGroups: string[];
  /** The local PostgreSQL, broker and Redis, whose CPU each timed window is charged. */
  readonly infra: InfraTargets;
}

/** The raw ceiling: a kafkajs consumer with the loop's settings whose eachBatch only resolves offsets. */
async function runRaw(env: Env, topic: string, total: number, tag: string): Promise<Timed> {
  const groupId = `${PREFIX}.raw-${tag}`;
  env.createdGroups.push(groupId);
  const consumer = env.kafka.consumer({ groupId, sessionTimeout: 30_000, heartbeatInterval: 3_000, allowAutoTopicCreation: false });
  let seen = 0;
  let last: number | undefined;
  try {
    return await timeConsumer(TIMEOUT_MS, 
      consumer,
      async () => {
        await consumer.connect();
        await consumer.subscribe({ topic, fromBeginning: true });
        await consumer.run({
          eachBatchAutoResolve: false,
          autoCommit: true,
          autoCommitInterval: 1_000,
          partitionsConsumedConcurrently: 3,
          eachBatch: async ({ batch, resolveOffset, commitOffsetsIfNecessary }) => {
            for (const m of batch.messages) {
              resolveOffset(m.offset);
              seen++;
            }
            if (seen >= total) last ??= performance.now();
            await commitOffsetsIfNecessary();
          },
        });
      },
      async () => seen >= total,
      `raw ${tag}`,
      () => last,
      env.infra,
    );
  } finally {
    await consumer.disconnect();
  }
}

interface PipelineRun {
  readonly timed: Timed;
  /** consumer_messages_total by outcome, and dedup_duplicates_total by tier. */
  readonly outcomes: Record<string, number>;
  readonly duplicatesByTier: Record<string, number>;
  /** Mean events per processor call (consumer_batch_size). */
  readonly meanRun: number;
  readonly processorCalls: number;
  readonly correctness: string[];
  /** Untimed setup and teardown steps, ms (filled in further by `close`). */
  readonly phases: Record<string, number>;
  /** Kept open for the relay pass; `close` tears it all down (the database stays until cleanup). */
  readonly pool: pg.Pool;
  readonly metrics: Metrics;
  readonly config: QaSvcConfig;
  readonly close: () => Promise<void>;
}

const counterSum = async (metrics: Metrics, name: string, help: string, labels: string[], by?: string): Promise<{ total: number; by: Record<string, number> }> => {
  const values = (await metrics.counter(name, help, labels).get()).values;
  const out: Record<string, number> = {};
  let total = 0;
  for (const v of values) {
    total += v.value;
    if (by) out[String(v.labels[by])] = (out[String(v.labels[by])] ?? 0) + v.value;
  }
  return { total, by: out };
};

/**
 * One pipeline pass, wired as runtime.ts wires qa-svc (minus HTTP, sweepers and the relay, which
 * is timed on its own afterwards): a fresh database migrated with qa-svc's migrations, the Snowflake
 * id source, the emitter, task signals, the dedup gate on Redis (namespace of its own) with the
 * Bloom fallback, the exactly-once shell with reviewConsumer, and the consumer loop.
 */
async function runPipeline(env: Env, prefix: string, workload: Workload, tag: string): Promise<PipelineRun> {
  const dbName = `${DB_PREFIX}_${tag}`.replace(/-/g, '_');
  /** Untimed setup and teardown steps, ms: reported so a slow one is seen, never part of the rate. */
  const phases: Record<string, number> = {};
  const step = async <T>(name: string, work: () => Promise<T> | T): Promise<T> => {
    const t = performance.now();
    try {
      return await work();
    } finally {
      phases[name] = Math.round((phases[name] ?? 0) + performance.now() - t);
    }
  };
  await step('create database', () => env.pgAdmin.query(`CREATE DATABASE ${dbName}`));
  env.createdDbs.push(dbName);
  const dbUrl = new URL(PG_URL);
  dbUrl.pathname = `/${dbName}`;
  const groupId = `${prefix}.${SERVICE}-${tag}`;
  env.createdGroups.push(groupId);
  const config = loadConfig(QaSvcConfig, {
    PORT: '0',
    KAFKA_BROKERS: BROKERS.join(','),
    DATABASE_URL: dbUrl.toString(),
    REDIS_URL,
    KAFKA_TOPIC_PREFIX: prefix,
    KAFKA_TOPIC_PARTITIONS: String(P),
    LOG_LEVEL,
    DEDUP_REDIS_TTL_MS: String(KEY_TTL_MS),
    // The service's HTTP side needs its token settings to start, though this bench only consumes.
    ...(await authEnv()),
  });
  const { logger, kafka, redis } = env;
  const closers: [string, () => Promise<unknown> | unknown][] = [];
  const close = async () => {
    for (const [name, c] of closers.splice(0).reverse()) await step(`close ${name}`, c).catch((error: Error) => progress(`  close ${name}: ${error.message}`));
  };
  try {
    const metrics = createMetrics({ service: SERVICE, defaults: false });
    const pool = createPool(config.DATABASE_URL);
    closers.push(['pool', () => pool.end()]);
    await step('migrate', () => migrate(pool, qaMigrations));
    const ids = await step('id source', () => createIdSource({ pool, service: SERVICE, logger }));
    closers.push(['id source', () => ids.close()]);
    const emitter = createEmitter({ producer: SERVICE, topicPrefix: prefix, channel: CHANNEL, now: () => new Date(), newId: () => ids.tryNext() ?? ids.next() });
    const signals = createTaskSignals({ pool, channel: SIGNAL_CHANNEL, logger: logger.child({ component: 'signals' }) });
    await step('signals', () => signals.start());
    closers.push(['signals', () => signals.close()]);
    const ctx: ServiceContext<QaSvcConfig> = {
      name: SERVICE,
      config,
      logger,
      metrics,
      pool,
      now: () => new Date(),
      nextId: () => ids.next(),
      newUuid: uuidIds,
      emit: emitter.emit,
      prepare: emitter.prepare,
      signals,
      longPolls: createLongPollQuota(config.LONG_POLLS_PER_CALLER),
    };
    const gate = createDedupGate({
      redis,
      inbox: inboxReader(pool),
      namespace: `${NS}:${tag}:${SERVICE}`,
      doneTtlMs: config.DEDUP_REDIS_TTL_MS,
      redisTimeoutMs: config.DEDUP_REDIS_TIMEOUT_MS,
      breaker: { failureThreshold: config.DEDUP_BREAKER_FAILURES, openMs: config.DEDUP_BREAKER_OPEN_MS },
      bloom: { capacity: config.DEDUP_BLOOM_CAPACITY, errorRate: config.DEDUP_BLOOM_ERROR_RATE },
      warmWindowMs: config.DEDUP_REDIS_TTL_MS,
      logger,
      metrics,
    });
    closers.push(['gate', () => gate.close()]);
    await step('gate warm', () => gate.warm());
    const processor = createExactlyOnce({ pool, gate, consumers: [reviewConsumer], ctx, emitMany: emitter.emitMany, onApplied: (taskIds) => signals.notification(taskIds) });
    const loop = createConsumerLoop<DomainEvent>({
      kafka,
      groupId,
      bindings: [{ topic: topicName(prefix, 'label'), schema: TopicSchemas.label, types: typesOnTopicOf('LabelSubmitted') }],
      deadLetterTopic: deadLetterTopic(prefix, SERVICE),
      logger,
      metrics,
      isRetriable: (error) => (error as { retriable?: boolean }).retriable === true || isTransientDbError(error),
      sessionTimeoutMs: config.KAFKA_SESSION_TIMEOUT_MS,
      minBytes: config.KAFKA_FETCH_MIN_BYTES,
      maxWaitTimeInMs: config.KAFKA_FETCH_MAX_WAIT_MS,
      retry: { initialMs: config.CONSUMER_RETRY_INITIAL_MS, maxMs: config.CONSUMER_RETRY_MAX_MS, maxAttempts: config.CONSUMER_MAX_ATTEMPTS },
      processor,
    });
    let loopClosed = false;
    const closeLoop = async () => {
      if (loopClosed) return;
      loopClosed = true;
      await loop.close();
    };
    closers.push(['consumer loop', closeLoop]);
    const total = workload.messages.length;
    const consumed = () => counterSum(metrics, 'consumer_messages_total', 'Consumed messages by outcome', ['topic', 'type', 'outcome'], 'outcome');
    const timed = await timeConsumer(TIMEOUT_MS, loop.consumer, () => loop.start(), async () => (await consumed()).total >= total, `pipeline ${tag}`, undefined, env.infra);
    await step('close consumer loop', closeLoop);

    const outcomes = (await consumed()).by;
    const duplicatesByTier = (await counterSum(metrics, 'dedup_duplicates_total', 'Duplicate deliveries caught, by the tier that caught them', ['tier'], 'tier')).by;
    const sizes = (await metrics.histogram('consumer_batch_size', 'Events applied together in one processor call', ['topic'], [1, 2, 5, 10, 20, 50, 100, 200, 500]).get()).values;
    const sizeSum = sizes.filter((v) => v.metricName?.endsWith('_sum')).reduce((a, v) => a + v.value, 0);
    const calls = sizes.filter((v) => v.metricName?.endsWith('_count')).reduce((a, v) => a + v.value, 0);
    const correctness = await step('verify', () => verifyPipeline(pool, prefix, workload, outcomes));
    return { timed, outcomes, duplicatesByTier, meanRun: calls > 0 ? sizeSum / calls : NaN, processorCalls: calls, correctness, phases, pool, metrics, config, close };
  } catch (error) {
    await close();
    throw error;
  }
}

/**
 * After a pipeline round: exactly the distinct tasks have one pending review each (attempt 1), one
 * QaStarted outbox row each (caused by that task's LabelSubmitted), one inbox row each; the loop
 * counted every distinct event applied and every re-send as a duplicate. Returns the problems.
 */
async function verifyPipeline(pool: pg.Pool, prefix: string, workload: Workload, outcomes: Record<string, number>): Promise<string[]> {
  const problems: string[] = [];
  const expect = (what: string, got: number | undefined, want: number) => {
    if (got !== want) problems.push(`${what}: ${got} (expected ${want})`);
  };
  const U = workload.taskIds.length;
  const one = async (sql: string, values: unknown[] = []) => (await pool.query<{ n: number }>(sql, values)).rows[0]?.n;
  expect('reviews', await one('SELECT count(*)::int AS n FROM reviews'), U);
  expect('reviews of the bench tasks', await one('SELECT count(DISTINCT task_id)::int AS n FROM reviews WHERE task_id = ANY($1::text[])', [workload.taskIds]), U);
  expect('tasks with other than one review', await one('SELECT count(*)::int AS n FROM (SELECT task_id FROM reviews GROUP BY task_id HAVING count(*) <> 1) x'), 0);
  expect("reviews not 'pending' at attempt 1 with a deadline", await one(`SELECT count(*)::int AS n FROM reviews WHERE status <> 'pending' OR attempt <> 1 OR deadline_at IS NULL`), 0);
  expect('review_tasks rows', await one('SELECT count(*)::int AS n FROM review_tasks'), U);
  expect('outbox rows', await one('SELECT count(*)::int AS n FROM outbox'), U);
  expect(
    'QaStarted outbox rows for distinct bench tasks',
    await one(`SELECT count(DISTINCT message_key)::int AS n FROM outbox WHERE event_type = 'QaStarted' AND topic = $1 AND message_key = ANY($2::text[])`, [topicName(prefix, 'qa'), workload.taskIds]),
    U,
  );
  expect('distinct causation ids in the outbox', await one(`SELECT count(DISTINCT payload->>'causationId')::int AS n FROM outbox`), U);
  expect('unpublished outbox rows', await one(countPendingSql), U);
  expect('inbox rows', await one('SELECT count(*)::int AS n FROM inbox'), U);
  expect("outcome 'applied'", outcomes.applied ?? 0, U);
  expect("outcome 'duplicate'", outcomes.duplicate ?? 0, workload.duplicates);
  for (const [outcome, n] of Object.entries(outcomes)) if (outcome !== 'applied' && outcome !== 'duplicate') problems.push(`outcome '${outcome}': ${n} (expected none)`);
  return problems;
}

interface RelayRun {
  readonly ms: number;
  readonly rows: number;
  readonly nodeCpuUs: number;
  readonly machineBusy: number;
  readonly windowUs: readonly [number, number];
  readonly infraMs: Partial<Record<Infra, number>>;
  readonly problems: string[];
}

/** The relay as runtime.ts starts it (pool, publisher, channel, poll and batch size from config), timed until every row is marked published. */
async function runRelay(env: Env, run: PipelineRun, rows: number, qaTopic: string): Promise<RelayRun> {
  const before = await topicMessages(env.admin, qaTopic);
  if (RELAY_ANALYZE) await run.pool.query('ANALYZE outbox');
  const publisher = createPublisher({ brokers: BROKERS, clientId: `bench-pipeline-relay-${RUN_ID}` });
  await publisher.connect();
  const relay = createOutboxRelay({
    pool: run.pool,
    publisher,
    channel: CHANNEL,
    logger: env.logger.child({ component: 'outbox' }),
    metrics: run.metrics,
    pollMs: run.config.OUTBOX_POLL_MS,
    batchSize: run.config.OUTBOX_BATCH_SIZE,
  });
  const published = () => counterSum(run.metrics, 'outbox_published_total', 'Outbox rows published to Kafka', []);
  const problems: string[] = [];
  let t0 = 0;
  let cpu0: NodeJS.CpuUsage | undefined;
  let m0 = machineCpu();
  let mono0 = 0;
  let t1 = 0;
  let infra0: Partial<Record<Infra, number>> = {};
  let infraMs: Partial<Record<Infra, number>> = {};
  try {
    infra0 = infraTicks(env.infra);
    cpu0 = process.cpuUsage();
    m0 = machineCpu();
    mono0 = monoUs();
    t0 = performance.now();
    relay.start();
    const deadline = Date.now() + TIMEOUT_MS;
    while ((await published()).total < rows) {
      if (Date.now() > deadline) throw new Error(`relay: not every row was published within ${TIMEOUT_MS / 1000} s`);
      await sleep(POLL_MS);
    }
    t1 = performance.now();
  } finally {
    // Read before closing: what the relay's close costs is not its publishing.
    infraMs = infraMsBetween(infra0, infraTicks(env.infra));
    await relay.close();
    await publisher.disconnect();
  }
  const cpu = process.cpuUsage(cpu0);
  const m1 = machineCpu();
  const pending = (await run.pool.query<{ n: number }>(countPendingSql)).rows[0]?.n;
  if (pending !== 0) problems.push(`${pending} outbox rows still unpublished`);
  const onTopic = (await topicMessages(env.admin, qaTopic)) - before;
  if (onTopic !== rows) problems.push(`${onTopic} messages reached ${qaTopic} for ${rows} rows`);
  return {
    ms: t1 - t0,
    rows,
    nodeCpuUs: cpu.user + cpu.system,
    machineBusy: (m1.busy - m0.busy) / Math.max(1, m1.total - m0.total),
    windowUs: [mono0, monoUs()],
    infraMs,
    problems,
  };
}

const slowPhases = (phases: Record<string, number>) =>
  Object.entries(phases)
    .filter(([, ms]) => ms > 250)
    .map(([name, ms]) => `${name} ${(ms / 1000).toFixed(1)} s`)
    .join(', ') || 'none';

async function topicMessages(admin: Admin, topic: string): Promise<number> {
  let total = 0;
  for (const p of await admin.fetchTopicOffsets(topic)) total += Number(p.high) - Number(p.low);
  return total;
}

// ---------------------------------------------------------------- main

async function main(): Promise<number> {
  const startedAt = new Date();
  // Read before anything runs: the files others edit can change during the run.
  const code = codeUnderTest();
  installTracePropagation();
  // The heap growth a qa-svc process runs with (startService), for both contenders alike.
  const heapGrowingPercent = QaSvcConfig.shape.HEAP_GROWING_PERCENT.parse(process.env['HEAP_GROWING_PERCENT'] || undefined);
  limitHeapGrowth(heapGrowingPercent);
  progress(`pipeline bench: events=${N} per round (${DUPLICATES} duplicates, ${DISTINCT} distinct tasks), rounds=${R}, partitions=${P}, warm-up=${WARMUP} events per contender, HEAP_GROWING_PERCENT=${heapGrowingPercent}`);
  progress(`code: ${code.commit.slice(0, 10)}${code.dirty ? ' + local changes' : ''}; relay.ts ${code.files['libs/outbox/src/relay.ts']}, consume.ts ${code.files['libs/service-kit/src/consume.ts']}, consumer.ts ${code.files['libs/messaging/src/consumer.ts']} (sha256 prefixes, all in the JSON)`);
  progress(`kafka=${BROKERS.join(',')} pg=${redactUrl(PG_URL)} redis=${REDIS_URL} topics=${PREFIX}.* databases=${DB_PREFIX}_* redis namespace=${NS}:*`);

  // Logs go to stderr. kafkajs warns once per idempotent producer that createKafka's retry limit
  // "may invalidate EoS guarantees" (every pass starts a DLQ producer and a publisher): counted, not printed.
  let eosWarnings = 0;
  const destination = new Writable({
    write(chunk: Buffer, _encoding, done) {
      if (chunk.includes('Limiting retries for the idempotent producer')) {
        eosWarnings++;
        return done();
      }
      process.stderr.write(chunk, () => done());
    },
  });
  const logger = createLogger({ service: 'bench-pipeline', level: LOG_LEVEL, destination });
  const kafka = createKafka({ brokers: BROKERS, clientId: `bench-pipeline-${RUN_ID}`, logger });
  const admin = kafka.admin();
  await admin.connect();
  const pgAdmin = new pg.Client({ connectionString: PG_URL });
  await pgAdmin.connect();
  // The same options runtime.ts gives the service's Redis connection.
  const redis = new Redis(REDIS_URL, { lazyConnect: true, maxRetriesPerRequest: 0, enableOfflineQueue: false, retryStrategy: (times) => Math.min(times * 50, 500) });
  redis.on('error', () => undefined);
  await redis.connect();
  const found = findInfra({ pgUrl: PG_URL, brokers: BROKERS, redisUrl: REDIS_URL });
  for (const note of found.notes) progress(`note: ${note}`);
  const env: Env = { kafka, admin, pgAdmin, logger, redis, createdDbs: [], createdGroups: [], infra: found.targets };
  const createdTopics: string[] = [];

  const versions = {
    kafka: await admin
      .describeCluster()
      .then((c) => `${c.brokers.length} broker(s)`)
      .catch(() => 'unknown'),
    postgres: (await pgAdmin.query<{ v: string }>('SHOW server_version')).rows[0]?.v ?? 'unknown',
    redis: /redis_version:(\S+)/.exec(await redis.info('server'))?.[1] ?? 'unknown',
  };

  const raw: { rate: number; timed: Timed }[] = [];
  const pipeline: { rate: number; run: Omit<PipelineRun, 'pool' | 'metrics' | 'config' | 'close'> }[] = [];
  const relay: { rate: number; run: RelayRun; vsPipeline: number }[] = [];
  const pipelineVsRaw: number[] = [];
  const incorrect: string[] = [];
  let failed: string | undefined;

  try {
    // Topics: the measured one and a warm-up one, each with the qa-events topic the outbox rows
    // go to and the service's dead-letter topic, as ensureTopics would create them.
    for (const prefix of [WARM_PREFIX, PREFIX]) {
      const topics = [topicName(prefix, 'label'), topicName(prefix, 'qa'), deadLetterTopic(prefix, SERVICE)];
      await createServedTopics(admin, topics.map((topic) => ({ topic, numPartitions: P, replicationFactor: 1 })));
      createdTopics.push(...topics);
    }
    const base = Date.now() - 3_600_000;
    const warm = makeWorkload(WARMUP, DUP_RATE, SEED + 1, base, 1);
    const work = makeWorkload(N, DUP_RATE, SEED, base + 10_000, 2);
    let t = performance.now();
    await produce(kafka, topicName(WARM_PREFIX, 'label'), warm);
    await produce(kafka, topicName(PREFIX, 'label'), work);
    progress(`produced ${warm.messages.length + work.messages.length} messages in ${((performance.now() - t) / 1000).toFixed(1)} s`);
    const onTopic = await topicMessages(admin, topicName(PREFIX, 'label'));
    if (onTopic !== N) throw new Error(`${onTopic} messages on ${topicName(PREFIX, 'label')}, expected ${N}`);

    // Warm-up (untimed): each contender once over the warm-up topic, the relay over its outbox.
    t = performance.now();
    const wr = await runRaw(env, topicName(WARM_PREFIX, 'label'), warm.messages.length, 'warm');
    const w = await runPipeline(env, WARM_PREFIX, warm, 'warm');
    try {
      if (w.correctness.length > 0) incorrect.push(...w.correctness.map((p) => `warm-up: ${p}`));
      const wl = await runRelay(env, w, warm.taskIds.length, topicName(WARM_PREFIX, 'qa'));
      if (wl.problems.length > 0) incorrect.push(...wl.problems.map((p) => `warm-up relay: ${p}`));
      progress(
        `warm-up done in ${((performance.now() - t) / 1000).toFixed(1)} s (raw ${(wr.ms / 1000).toFixed(2)} s, pipeline ${(w.timed.ms / 1000).toFixed(2)} s, ` +
          `relay ${(wl.ms / 1000).toFixed(2)} s for ${wl.rows} rows)`,
      );
    } finally {
      await w.close();
      progress(`  warm-up untimed steps over 250 ms: ${slowPhases(w.phases)}`);
    }

    const label = topicName(PREFIX, 'label');
    for (let round = 1; round <= R; round++) {
      progress(`round ${round}/${R}`);
      const r = await runRaw(env, label, N, `r${round}`);
      const rawRate = (N / r.ms) * 1000;
      raw.push({ rate: rawRate, timed: r });
      progress(`  raw kafkajs consumer          ${fmtRate(rawRate).padStart(9)} events/s  ${(r.ms / 1000).toFixed(2)} s (+${r.joinMs.toFixed(0)} ms join)  node cpu ${(r.nodeCpuUs / N).toFixed(1)} µs/event  machine ${(r.machineBusy * 100).toFixed(0)}% busy  ${fmtInfra(r.infraMs, N, 'event')}`);

      const p = await runPipeline(env, PREFIX, work, `r${round}`);
      try {
        const rate = (N / p.timed.ms) * 1000;
        const { pool: _pool, metrics: _metrics, config: _config, close: _close, ...kept } = p;
        pipeline.push({ rate, run: kept });
        pipelineVsRaw.push(rate / rawRate);
        const tiers = Object.entries(p.duplicatesByTier).map(([k, v]) => `${k} ${v}`).join(', ');
        progress(
          `  pipeline (qa-svc reviews)     ${fmtRate(rate).padStart(9)} events/s  ${(p.timed.ms / 1000).toFixed(2)} s (+${p.timed.joinMs.toFixed(0)} ms join)  node cpu ${(p.timed.nodeCpuUs / N).toFixed(1)} µs/event  machine ${(p.timed.machineBusy * 100).toFixed(0)}% busy  ${fmtInfra(p.timed.infraMs, N, 'event')}` +
            `  ${p.processorCalls} processor calls, mean ${p.meanRun.toFixed(0)} events  duplicates: ${tiers || 'none'}`,
        );
        if (p.correctness.length > 0) {
          incorrect.push(...p.correctness.map((x) => `round ${round}: ${x}`));
          progress(`  !!! CORRECTNESS FAILURE in round ${round}:\n    ${p.correctness.join('\n    ')}`);
        } else {
          progress(`  correctness: ${work.taskIds.length} tasks, one pending review and one QaStarted outbox row each; ${work.duplicates} duplicates dropped`);
        }

        const rl = await runRelay(env, p, work.taskIds.length, topicName(PREFIX, 'qa'));
        const relayRate = (rl.rows / rl.ms) * 1000;
        relay.push({ rate: relayRate, run: rl, vsPipeline: relayRate / rate });
        progress(
          `  outbox relay                  ${fmtRate(relayRate).padStart(9)} rows/s    ${(rl.ms / 1000).toFixed(2)} s for ${rl.rows} rows  node cpu ${(rl.nodeCpuUs / rl.rows).toFixed(1)} µs/row  machine ${(rl.machineBusy * 100).toFixed(0)}% busy  ${fmtInfra(rl.infraMs, rl.rows, 'row')}  ${fmtX(relayRate / rate)} the pipeline` +
            (rl.problems.length > 0 ? `  (${rl.problems.join('; ')})` : ''),
        );
        if (rl.problems.length > 0) incorrect.push(...rl.problems.map((x) => `round ${round} relay: ${x}`));
      } finally {
        await p.close();
        progress(`  untimed steps over 250 ms: ${slowPhases(p.phases)}`);
      }
      // The pass's database is no longer needed: drop it now rather than hold 3 of them.
      const db = env.createdDbs.pop();
      if (db) await pgAdmin.query(`DROP DATABASE IF EXISTS ${db} WITH (FORCE)`).catch(() => env.createdDbs.push(db));
    }
    const dlq = await topicMessages(admin, deadLetterTopic(PREFIX, SERVICE));
    if (dlq !== 0) incorrect.push(`${dlq} messages were dead-lettered`);
  } catch (error) {
    failed = error instanceof Error ? `${error.name}: ${error.message}` : String(error);
    progress(`bench failed: ${failed}`);
  } finally {
    await cleanup(env, createdTopics);
  }
  if (raw.length === 0 || pipeline.length === 0) {
    console.error(`pipeline bench could not run${failed ? `: ${failed}` : ''}`);
    return 1;
  }

  // ---------------------------------------------------------------- report
  const rawMedian = median(raw.map((r) => r.rate));
  const pipeMedian = median(pipeline.map((r) => r.rate));
  const relayMedian = relay.length > 0 ? median(relay.map((r) => r.rate)) : NaN;
  const pipeRatio = pipelineVsRaw.length > 0 ? median(pipelineVsRaw) : NaN;
  const relayRatio = relay.length > 0 ? median(relay.map((r) => r.vsPipeline)) : NaN;
  const range = (xs: readonly number[]) => `${fmtRate(Math.min(...xs))}–${fmtRate(Math.max(...xs))}`;
  const met = (value: number, target: number) => (!Number.isFinite(value) ? 'n/a' : value >= target ? 'yes' : 'no');
  // Node CPU per item moves less than the rates on a busy or noisy host: the figure to compare
  // between runs of different code.
  const cpuPer = (xs: readonly { readonly cpuUs: number; readonly items: number }[]) => median(xs.map((x) => x.cpuUs / x.items)).toFixed(1);
  const table = [
    `| Contender | Events/s, median of ${R} | Range (min–max) | Ratio to raw | Node CPU µs per event, median | Target | Met? |`,
    '|---|---:|---:|---:|---:|---|---|',
    `| Raw kafkajs consumer (no-op eachBatch, resolves offsets) | ${fmtRate(rawMedian)} | ${range(raw.map((r) => r.rate))} | 1.00x | ${cpuPer(raw.map((r) => ({ cpuUs: r.timed.nodeCpuUs, items: N })))} | ceiling | — |`,
    `| Pipeline: consumer loop + exactly-once shell + qa-svc reviewConsumer${incorrect.length > 0 ? ' (**INCORRECT RESULTS**)' : ''} | ${fmtRate(pipeMedian)} | ${range(pipeline.map((r) => r.rate))} | ${fmtX(pipeRatio)} | ${cpuPer(pipeline.map((p) => ({ cpuUs: p.run.timed.nodeCpuUs, items: N })))} | ≥ ${PIPELINE_TARGET}x raw | ${met(pipeRatio, PIPELINE_TARGET)} |`,
    relay.length > 0
      ? `| Outbox relay (rows/s, ${DISTINCT} rows per round) | ${fmtRate(relayMedian)} | ${range(relay.map((r) => r.rate))} | ${fmtX(relayMedian / rawMedian)} (${fmtX(relayRatio)} pipeline) | ${cpuPer(relay.map((r) => ({ cpuUs: r.run.nodeCpuUs, items: r.run.rows })))} per row | ≥ ${RELAY_TARGET}x pipeline | ${met(relayRatio, RELAY_TARGET)} |`
      : '| Outbox relay | did not run | — | — | — | — | — |',
  ].join('\n');
  console.log('\n' + table + '\n');
  console.log(
    `Events/s: ${N} messages per round (${DUPLICATES} exact duplicates) from the group join to the last message accounted for (pipeline: consumer_messages_total = ${N}); ` +
      `median of ${R} interleaved rounds, each contender on a fresh consumer group. Relay: rows/s from relay.start() until outbox_published_total = every row.`,
  );
  console.log(`RATIO pipeline ÷ raw: ${fmtX(pipeRatio)} (target ≥ ${PIPELINE_TARGET}x) → ${pipeRatio >= PIPELINE_TARGET ? 'PASS' : 'MISS'}  [per round: ${pipelineVsRaw.map((x) => x.toFixed(3)).join(', ')}]`);
  if (relay.length > 0) console.log(`RATIO relay rows/s ÷ pipeline events/s: ${fmtX(relayRatio)} (target ≥ ${RELAY_TARGET}x) → ${relayRatio >= RELAY_TARGET ? 'PASS' : 'MISS'}  [per round: ${relay.map((r) => r.vsPipeline.toFixed(2)).join(', ')}]`);
  const floor = cpuFloor(pipeline.map((p) => p.run.timed), raw.map((r) => r.timed), N);
  if (Number.isFinite(floor.infraUsPerEvent)) console.log(describeFloor(floor, rawMedian, N));
  if (failed) console.log(`NOTE the run stopped early: ${failed}`);
  if (eosWarnings > 0) progress(`note: kafkajs warned ${eosWarnings} times "Limiting retries for the idempotent producer may invalidate EoS guarantees" (createKafka sets retries: 8; not printed)`);
  if (incorrect.length > 0) {
    console.log(`\n!!! CORRECTNESS FAILURE (${incorrect.length} problem(s)); the pipeline numbers above are not valid:\n  ${incorrect.join('\n  ')}`);
  }

  const here = dirname(fileURLToPath(import.meta.url));
  const outDir = join(here, 'results');
  mkdirSync(outDir, { recursive: true });
  const file = join(outDir, `pipeline-${startedAt.toISOString().replace(/[:.]/g, '-')}.json`);
  const report = {
    startedAt: startedAt.toISOString(),
    command: `npm run bench:pipeline -- ${process.argv.slice(2).join(' ')}`.trim(),
    args: { events: N, duplicates: DUP_RATE, duplicateMessages: DUPLICATES, distinctTasks: DISTINCT, rounds: R, partitions: P, seed: SEED, warmupEvents: WARMUP, heapGrowingPercent },
    machine: { cpus: os.cpus().length, cpuModel: os.cpus()[0]?.model, totalMemBytes: os.totalmem(), platform: `${os.platform()} ${os.release()}`, node: process.version, loadavg: os.loadavg() },
    servers: versions,
    code,
    notes: [
      'events/s = messages on the topic (duplicates included) ÷ time from the consumer group join to the last message accounted for; the join (connect, join, sync) is reported separately as joinMs.',
      'Rounds interleave raw, pipeline, relay; each pipeline pass has a fresh database migrated with qa-svc migrations, a fresh consumer group and its own Redis namespace.',
      'The relay publishes the rows its round left in the outbox (one QaStarted per distinct task) to <prefix>.qa-events; its ratio is relay rows/s ÷ that round\'s pipeline events/s.',
      'machineBusy is the share of all cores busy over the timed window (/proc/stat): Kafka, PostgreSQL and Redis run on the same machine.',
      'infraMs is the CPU of the local PostgreSQL (postmaster, every backend, and backends that ended), Kafka broker and Redis over the window (/proc/<pid>/stat, 10 ms ticks); summary.cpuFloor divides the cores by the CPU per event.',
      'profileWindowsUs are CLOCK_MONOTONIC µs, the clock of .cpuprofile timestamps: bench/profile-summary.ts cuts a profile to them.',
    ],
    raw: raw.map((r) => ({ eventsPerSec: r.rate, ...r.timed })),
    pipeline: pipeline.map((p) => ({ eventsPerSec: p.rate, ...p.run.timed, outcomes: p.run.outcomes, duplicatesByTier: p.run.duplicatesByTier, processorCalls: p.run.processorCalls, meanEventsPerCall: p.run.meanRun, correctness: p.run.correctness, untimedStepsMs: p.run.phases })),
    relay: relay.map((r) => ({ rowsPerSec: r.rate, vsPipeline: r.vsPipeline, ...r.run })),
    summary: {
      rawEventsPerSec: rawMedian,
      pipelineEventsPerSec: pipeMedian,
      relayRowsPerSec: relayMedian,
      pipelineVsRaw: { value: pipeRatio, perRound: pipelineVsRaw, target: PIPELINE_TARGET, met: pipeRatio >= PIPELINE_TARGET },
      relayVsPipeline: { value: relayRatio, perRound: relay.map((r) => r.vsPipeline), target: RELAY_TARGET, met: relayRatio >= RELAY_TARGET },
      cpuFloor: floor,
      correct: incorrect.length === 0,
      problems: incorrect,
      ...(failed ? { stoppedEarly: failed } : {}),
      kafkajsEosRetryWarnings: eosWarnings,
    },
    profileWindowsUs: {
      raw: raw.map((r) => r.timed.windowUs),
      pipeline: pipeline.map((p) => p.run.timed.windowUs),
      relay: relay.map((r) => r.run.windowUs),
    },
    table,
  };
  writeFileSync(file, JSON.stringify(report, null, 2) + '\n');
  console.log(`\nresults: ${file}`);
  return incorrect.length > 0 || failed ? 1 : 0;
}

async function cleanup(env: Env, topics: readonly string[]): Promise<void> {
  const step = async (what: string, work: () => Promise<unknown>) => {
    try {
      await work();
    } catch (error) {
      progress(`cleanup: ${what} failed: ${(error as Error).message}`);
    }
  };
  let removed = 0;
  await step('redis keys', async () => {
    let cursor = '0';
    do {
      const [nextCursor, keys] = await env.redis.scan(cursor, 'MATCH', `${NS}:*`, 'COUNT', 1000);
      cursor = nextCursor;
      if (keys.length > 0) removed += await env.redis.unlink(...keys);
    } while (cursor !== '0');
  });
  await step('consumer groups', () => env.admin.deleteGroups([...env.createdGroups]));
  await step('topics', () => env.admin.deleteTopics({ topics: [...topics] }));
  for (const db of env.createdDbs) await step(`drop database ${db}`, () => env.pgAdmin.query(`DROP DATABASE IF EXISTS ${db} WITH (FORCE)`));
  progress(`cleanup: unlinked ${removed} keys under ${NS}:*, deleted ${env.createdGroups.length} consumer groups and ${topics.length} topics, dropped every ${DB_PREFIX}_* database`);
  await step('redis', () => env.redis.quit());
  await step('kafka admin', () => env.admin.disconnect());
  await step('pg admin', () => env.pgAdmin.end());
}

/**
 * The code under test, fingerprinted: the git commit, whether the tree has local changes, and a
 * hash of each source file on the measured path, so runs made while it changes can be told apart.
 */
function codeUnderTest(): { commit: string; dirty: boolean; files: Record<string, string> } {
  const root = join(dirname(fileURLToPath(import.meta.url)), '..');
  const git = (...a: string[]) => {
    try {
      return execFileSync('git', a, { cwd: root, encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).trim();
    } catch {
      return '';
    }
  };
  const files = [
    'libs/messaging/src/consumer.ts',
    'libs/messaging/src/codec.ts',
    'libs/messaging/src/kafka.ts',
    'libs/service-kit/src/consume.ts',
    'libs/service-kit/src/events.ts',
    'libs/service-kit/src/db.ts',
    'libs/dedup/src/gate.ts',
    'libs/dedup/src/inbox.ts',
    'libs/dedup/src/redis-tier.ts',
    'libs/dedup/src/bloom.ts',
    'libs/outbox/src/relay.ts',
    'libs/outbox/src/store.ts',
    'apps/qa-svc/src/reviews/reactions.ts',
    'apps/qa-svc/src/reviews/repository.ts',
    'apps/qa-svc/src/reviews/decide.ts',
    'apps/qa-svc/src/migrations.ts',
  ];
  const hashes: Record<string, string> = {};
  for (const f of files) {
    try {
      hashes[f] = createHash('sha256').update(readFileSync(join(root, f))).digest('hex').slice(0, 12);
    } catch {
      hashes[f] = 'missing';
    }
  }
  return { commit: git('rev-parse', 'HEAD') || 'unknown', dirty: git('status', '--porcelain', '--untracked-files=no') !== '', files: hashes };
}

runBench('pipeline', main);
