// Ingest benchmark (issue 11): bulk import through task-svc's endpoint against a raw INSERT ceiling,
// task-svc's resident memory while a large file streams in, machine pre-labels through label-svc's
// consumer against a raw kafkajs consumer, and the seed's four idempotency strategies on our stack.
//   npm run bench:ingest -- --rows 200000 --repeat 0.2 --rounds 3 --rss-lines 1000000
//   npm run bench:ingest -- --rows 20000 --rss-lines 100000 --prelabel-events 5000 --strategy-items 5000   (quick)
// Env: KAFKA_BROKERS (default 127.0.0.1:9092), PG_URL (default postgres://postgres@127.0.0.1:5432/postgres),
// REDIS_URL (default redis://127.0.0.1:6379), LOG_LEVEL (default warn, the in-process service's logs).
// The import section also accounts CPU per 1,000 lines by process (task-svc, PostgreSQL, Kafka, this
// process, the rest of the machine: bench/ingest/cpu.ts), for the endpoint and the ceiling.
// Starts what it needs itself: builds the services (scripts/build.mjs) and runs task-svc as a process
// on a fresh database and topic prefix, label-svc in process (buildService) on a fresh database per
// round. Everything it creates is removed at the end: databases lf_bench_ingest_<run id>_*, topics
// lf-bench-ingest-<run id>.*, consumer groups, Redis keys under lf:bench:ingest:<run id>:* (SCAN +
// UNLINK, never FLUSHDB; every key also has a TTL). Progress goes to stderr, the tables to stdout,
// the results to bench/results/ingest-<timestamp>.json. Exit code 0 whatever the targets say; 1 if
// the bench could not run or a contender gave a wrong result (then its number means nothing).
import { execFileSync } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdirSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Writable } from 'node:stream';
import { parseArgs } from 'node:util';
import { Redis } from 'ioredis';
import { Kafka, logLevel, Partitioners, type Admin } from 'kafkajs';
import { createServedTopics, fixKafkajsIdleLoop } from '@labelflow/messaging';
import pg from 'pg';
import { buildPrelabelProposed, inputTopicName, prelabelMessage } from '@labelflow/contracts';
import { composeSnowflake } from '@labelflow/idgen';
import { countPendingSql } from '@labelflow/outbox';
import { buildService, loadConfig, migrate, type BuiltService } from '@labelflow/service-kit';
import { createLogger, type Logger } from '@labelflow/telemetry';
import { ADMIN, as, authEnv, buildServices, startServiceProcess, tokenFor, type ServiceProcess } from '@labelflow/testing';
import { LabelSvcConfig } from '../apps/label-svc/src/config';
import { labelService } from '../apps/label-svc/src/service';
import { migrations as taskMigrations } from '../apps/task-svc/src/migrations';
import { importFileChunks, importLines, planImportFile, type ImportFileOptions } from '../tools/producer/src/ndjson';
import { checkImportSummary, uploadImport, UploadKind, type ImportSummary } from '../tools/producer/src/upload';
import { cpuFloor, describeFloor, fmtInfra, fmtRate, median, percentile, positiveInt, redactUrl, runBench, timeConsumer, type Timed } from './common';
import { findInfra, type InfraTargets } from './proc';
import { runCeiling, type CeilingRun } from './ingest/ceiling';
import { CpuColumn, cpuColumnsFound, cpuTargets, withCpu, type CpuTargets } from './ingest/cpu';
import { sampleRss, type RssSeries } from './ingest/rss';
import { prepareStrategies, runStrategy, seedFigures, Strategy, strategyLabels, strategyWorkload, type StrategyRun } from './ingest/strategies';

const SECTIONS = ['import', 'rss', 'prelabels', 'strategies'] as const;
type Section = (typeof SECTIONS)[number];

const { values: args } = parseArgs({
  options: {
    rows: { type: 'string', default: '200000' },
    repeat: { type: 'string', default: '0.2' },
    rounds: { type: 'string', default: '3' },
    batch: { type: 'string', default: '1000' },
    'rss-lines': { type: 'string', default: '1000000' },
    'prelabel-events': { type: 'string', default: '20000' },
    'prelabel-duplicates': { type: 'string', default: '0.2' },
    partitions: { type: 'string', default: '6' },
    'strategy-items': { type: 'string', default: '20000' },
    'strategy-concurrency': { type: 'string', default: '16' },
    only: { type: 'string', default: SECTIONS.join(',') },
    seed: { type: 'string', default: '1' },
    'timeout-s': { type: 'string', default: '900' },
    help: { type: 'boolean', default: false },
  },
});
if (args.help) {
  console.log(
    'npm run bench:ingest -- [--rows 200000] [--repeat 0.2] [--rounds 3] [--batch 1000] [--rss-lines 1000000] [--prelabel-events 20000] [--prelabel-duplicates 0.2]\n' +
      '                        [--partitions 6] [--strategy-items 20000] [--strategy-concurrency 16] [--only import,rss,prelabels,strategies] [--seed 1] [--timeout-s 900]',
  );
  process.exit(0);
}
const share = (name: string, raw: string | undefined): number => {
  const n = Number(raw);
  if (!(Number.isFinite(n) && n >= 0 && n < 1)) throw new Error(`--${name} must be a fraction from 0 up to (not including) 1, got ${raw}`);
  return n;
};
const ROWS = positiveInt('rows', args.rows);
const REPEAT = share('repeat', args.repeat);
const ROUNDS = positiveInt('rounds', args.rounds);
const BATCH = positiveInt('batch', args.batch);
const RSS_LINES = positiveInt('rss-lines', args['rss-lines']);
const PRELABELS = positiveInt('prelabel-events', args['prelabel-events']);
const PRELABEL_DUPS = share('prelabel-duplicates', args['prelabel-duplicates']);
const PARTITIONS = positiveInt('partitions', args.partitions);
const STRATEGY_ITEMS = positiveInt('strategy-items', args['strategy-items']);
const STRATEGY_CONCURRENCY = positiveInt('strategy-concurrency', args['strategy-concurrency']);
const SEED = positiveInt('seed', args.seed);
const TIMEOUT_MS = positiveInt('timeout-s', args['timeout-s']) * 1000;
const ONLY = new Set(
  String(args.only)
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean),
);
for (const s of ONLY) if (!(SECTIONS as readonly string[]).includes(s)) throw new Error(`--only takes ${SECTIONS.join(', ')}; got ${s}`);
const runs = (s: Section) => ONLY.has(s);

const IMPORT_TARGET = 0.5; // endpoint rows/s ÷ ceiling rows/s
const RSS_TARGET_BYTES = 300 * 1024 * 1024;
const PRELABEL_TARGET = 0.35; // label-svc events/s ÷ raw events/s
const BROKERS = (process.env.KAFKA_BROKERS ?? '127.0.0.1:9092').split(',');
const PG_URL = process.env.PG_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';
const REDIS_URL = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';
const LOG_LEVEL = process.env.LOG_LEVEL ?? 'warn';
const RUN_ID = `${Date.now().toString(36)}${randomUUID().slice(0, 6)}`;
const PREFIX = `lf-bench-ingest-${RUN_ID}`;
const DB_PREFIX = `lf_bench_ingest_${RUN_ID}`.toLowerCase();
const NS = `lf:bench:ingest:${RUN_ID}`;
const KEY_TTL_MS = 600_000;

const progress = (line: string) => process.stderr.write(`${line}\n`);
const fmtX = (n: number) => (Number.isFinite(n) ? `${n.toFixed(2)}x` : 'n/a');
const fmtMs = (n: number) => (Number.isFinite(n) ? (n >= 100 ? n.toFixed(0) : n.toFixed(1)) : 'n/a');
const mb = (bytes: number) => (Number.isFinite(bytes) ? `${(bytes / 1024 / 1024).toFixed(0)} MB` : 'n/a');
const range = (xs: readonly number[]) => (xs.length > 0 ? `${fmtRate(Math.min(...xs))}–${fmtRate(Math.max(...xs))}` : 'n/a');
const CPU_COLUMNS = ['taskSvc', 'postgres', 'kafka', 'driver', 'other'] as const;
/** CPU ms per 1,000 lines by process (n/a: not measured), and the machine's busy total. */
const cpuLine = (cpu: Partial<Record<CpuColumn, number>> & { readonly busy: number }, lines: number) =>
  [...CPU_COLUMNS.map((c) => `${CpuColumn[c]} ${cpu[c] === undefined ? 'n/a' : fmtMs((cpu[c] * 1000) / lines)}`), `machine ${fmtMs((cpu.busy * 1000) / lines)}`].join(', ');
const dbUrl = (name: string) => {
  const u = new URL(PG_URL);
  u.pathname = `/${name}`;
  return u.toString();
};

interface Env {
  readonly logger: Logger;
  readonly pgAdmin: pg.Client;
  readonly redis: Redis;
  readonly admin: Admin;
  readonly kafka: Kafka;
  readonly createdDbs: string[];
  readonly createdGroups: string[];
  readonly createdTopics: string[];
  /** The local PostgreSQL, broker and Redis, whose CPU the pre-label windows are charged. */
  readonly infra: InfraTargets;
}

// ---------------------------------------------------------------- import: endpoint vs ceiling

/** Cumulative import_batch_seconds buckets of task-svc (le → count), from its /metrics. */
async function batchHistogram(url: string): Promise<Map<number, number>> {
  const res = await fetch(`${url}/metrics`, { headers: { authorization: `Bearer ${await tokenFor(ADMIN)}` } });
  const text = await res.text();
  const buckets = new Map<number, number>();
  for (const m of text.matchAll(/^import_batch_seconds_bucket\{[^}]*le="([^"]+)"[^}]*\} (\S+)$/gm)) {
    const le = m[1] === '+Inf' ? Infinity : Number(m[1]);
    buckets.set(le, (buckets.get(le) ?? 0) + Number(m[2]));
  }
  return buckets;
}

/** The p99 of the batches between two histogram reads, as the upper bound of its bucket (ms), and the count. */
function bucketP99(before: Map<number, number>, after: Map<number, number>): { p99Ms: number; batches: number } {
  const les = [...after.keys()].sort((a, b) => a - b);
  const diff = les.map((le) => [le, (after.get(le) ?? 0) - (before.get(le) ?? 0)] as const);
  const total = diff.at(-1)?.[1] ?? 0;
  const hit = diff.find(([, n]) => n >= Math.ceil(total * 0.99));
  return { p99Ms: hit ? hit[0] * 1000 : NaN, batches: total };
}

interface EndpointRun {
  readonly ms: number;
  readonly summary: ImportSummary;
  readonly p99BatchMsBound: number;
  readonly batches: number;
  readonly problems: readonly string[];
  /** From the endpoint's answer until the relay had published every TaskCreated of the import (not in `ms`). */
  readonly relayLagMs: number;
}

/**
 * Waits until task-svc's relay has published every outbox row, so that what the endpoint set in
 * motion is over before the ceiling runs: a relay still reading and marking rows (and the
 * autovacuum they start) would slow the ceiling down and flatter the ratio.
 */
async function relayCaughtUp(taskDb: pg.Pool): Promise<number> {
  const t0 = performance.now();
  for (;;) {
    const { rows } = await taskDb.query<{ n: number }>(countPendingSql);
    if (rows[0]?.n === 0) return performance.now() - t0;
    if (performance.now() - t0 > TIMEOUT_MS) throw new Error(`task-svc's relay left ${rows[0]?.n} outbox rows unpublished ${TIMEOUT_MS} ms after the import answered`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

/**
 * Vacuums task-svc's tables once the endpoint's work is over, so that the ceiling runs on a quiet
 * machine: each published mark leaves a dead row version, and autovacuum (or, where it is off, as
 * on our machine, task-svc's own table upkeep when its interval comes round) could otherwise clean
 * them up while the ceiling runs, slowing it and flattering the ratio. The time and CPU are
 * reported as the endpoint's upkeep.
 */
async function vacuumTaskTables(taskDb: pg.Pool): Promise<number> {
  const t0 = performance.now();
  await taskDb.query('VACUUM (ANALYZE) outbox, outbox_pending, tasks, imports');
  return performance.now() - t0;
}

async function runEndpoint(task: ServiceProcess, file: ImportFileOptions, taskDb: pg.Pool): Promise<EndpointRun> {
  const projectId = randomUUID();
  const token = `Bearer ${await tokenFor(as.manager('bench-manager', projectId))}`;
  const before = await batchHistogram(task.url);
  const t0 = performance.now();
  const result = await uploadImport({ baseUrl: task.url, projectId, importId: randomUUID(), authorization: () => token, body: () => importFileChunks(file), idleTimeoutMs: TIMEOUT_MS });
  const ms = performance.now() - t0;
  if (!result.ok) throw new Error(`the import endpoint answered ${result.status}: ${JSON.stringify(result.body).slice(0, 500)}`);
  const { p99Ms, batches } = bucketP99(before, await batchHistogram(task.url));
  const relayLagMs = await relayCaughtUp(taskDb);
  return { ms, summary: result.summary, p99BatchMsBound: p99Ms, batches, relayLagMs, problems: checkImportSummary(file, planImportFile(file), result.summary, UploadKind.first) };
}

async function startTaskSvc(env: Env): Promise<ServiceProcess> {
  const db = `${DB_PREFIX}_task`;
  env.createdDbs.push(db);
  return startServiceProcess('task-svc', {
    ...(await authEnv()),
    KAFKA_BROKERS: BROKERS.join(','),
    REDIS_URL,
    DATABASE_URL: dbUrl(db),
    KAFKA_TOPIC_PREFIX: PREFIX,
    KAFKA_TOPIC_PARTITIONS: String(PARTITIONS),
    RATE_LIMIT_PER_SECOND: '100000',
    RATE_LIMIT_BURST: '100000',
  });
}

// ---------------------------------------------------------------- pre-labels: label-svc vs raw consumer


interface PrelabelWork {
  readonly prefix: string;
  readonly topic: string;
  readonly total: number;
  readonly distinct: number;
  readonly duplicates: number;
}

interface PrelabelMessages {
  readonly messages: readonly { key: string; value: string; headers: Record<string, string> }[];
  readonly distinct: number;
}

/** Proposals for distinct tasks, `rate` of the messages exact re-sends of earlier ones, built once. */
function prelabelMessages(): PrelabelMessages {
  const base = Date.now() - 3_600_000;
  const projects = Array.from({ length: 8 }, () => randomUUID());
  const messages: { key: string; value: string; headers: Record<string, string> }[] = [];
  let distinct = 0;
  for (const l of importLines({ lines: PRELABELS, repeat: PRELABEL_DUPS, bad: 0, seed: SEED, tag: 'p' })) {
    const i = l.item ?? 0;
    if (l.kind === 'item') distinct++;
    const taskId = composeSnowflake({ timestampMs: base + Math.floor(i / 4096), workerId: 3, sequence: i % 4096 });
    const proposal = buildPrelabelProposed({
      id: `bench-${i}`,
      taskId,
      projectId: projects[i % projects.length] ?? randomUUID(),
      attempt: 1,
      model: { name: 'bench-detector', version: '1.0.0' },
      annotations: [{ label: i % 2 ? 'cat' : 'dog', confidence: 0.5 + (i % 50) / 100 }],
      occurredAt: new Date(base + 60_000).toISOString(),
    });
    messages.push({ ...prelabelMessage(proposal) });
  }
  return { messages, distinct };
}

/**
 * The same messages on a topic of their own per round: label-svc's dedup namespace follows the
 * topic prefix, so each round's label-svc starts with nothing seen, like a fresh consumer group.
 */
async function producePrelabels(env: Env, prefix: string, m: PrelabelMessages): Promise<PrelabelWork> {
  const topic = inputTopicName(prefix, 'prelabels');
  await createServedTopics(env.admin, [{ topic, numPartitions: PARTITIONS, replicationFactor: 1 }]);
  env.createdTopics.push(topic);
  const producer = env.kafka.producer({ idempotent: true, maxInFlightRequests: 1, allowAutoTopicCreation: false, createPartitioner: Partitioners.DefaultPartitioner });
  await producer.connect();
  try {
    for (let at = 0; at < m.messages.length; at += 2_000) await producer.send({ topic, acks: -1, messages: m.messages.slice(at, at + 2_000) });
  } finally {
    await producer.disconnect();
  }
  return { prefix, topic, total: m.messages.length, distinct: m.distinct, duplicates: m.messages.length - m.distinct };
}

async function runRawConsumer(env: Env, work: PrelabelWork, tag: string): Promise<Timed> {
  const groupId = `${work.prefix}.raw-${tag}`;
  env.createdGroups.push(groupId);
  const consumer = env.kafka.consumer({ groupId, sessionTimeout: 30_000, heartbeatInterval: 3_000, allowAutoTopicCreation: false });
  let seen = 0;
  let last: number | undefined;
  try {
    return await timeConsumer(TIMEOUT_MS, 
      consumer,
      async () => {
        await consumer.connect();
        await consumer.subscribe({ topic: work.topic, fromBeginning: true });
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
            if (seen >= work.total) last ??= performance.now();
            await commitOffsetsIfNecessary();
          },
        });
      },
      async () => seen >= work.total,
      `raw ${tag}`,
      () => last,
      env.infra,
    );
  } finally {
    await consumer.disconnect();
  }
}

interface LabelSvcRun {
  readonly timed: Timed;
  readonly outcomes: Record<string, number>;
  readonly problems: readonly string[];
}

/** label-svc as buildService wires it (fresh database, its own consumer group), only its consumer started. */
async function runLabelSvc(env: Env, work: PrelabelWork, tag: string): Promise<LabelSvcRun> {
  const db = `${DB_PREFIX}_label_${tag}`;
  env.createdDbs.push(db);
  const config = loadConfig(LabelSvcConfig, {
    PORT: '0',
    KAFKA_BROKERS: BROKERS.join(','),
    DATABASE_URL: dbUrl(db),
    REDIS_URL,
    KAFKA_TOPIC_PREFIX: work.prefix,
    KAFKA_TOPIC_PARTITIONS: String(PARTITIONS),
    LOG_LEVEL,
    DEDUP_REDIS_TTL_MS: String(KEY_TTL_MS),
    ...(await authEnv()),
  });
  // Its prefix is the round's: its own topics, consumer group and dedup namespace.
  const built: BuiltService<LabelSvcConfig> = await buildService(labelService, config, { logger: env.logger });
  try {
    const consumed = async () => {
      const values = (await built.ctx.metrics.counter('consumer_messages_total', 'Consumed messages by outcome', ['topic', 'type', 'outcome']).get()).values;
      const out: Record<string, number> = {};
      let total = 0;
      for (const v of values) {
        if (v.labels.topic !== work.topic) continue;
        total += v.value;
        out[String(v.labels.outcome)] = (out[String(v.labels.outcome)] ?? 0) + v.value;
      }
      return { total, out };
    };
    const timed = await timeConsumer(TIMEOUT_MS, built.consumer.consumer, () => built.consumer.start(), async () => (await consumed()).total >= work.total, `label-svc ${tag}`, undefined, env.infra);
    await built.consumer.close();
    const outcomes = (await consumed()).out;
    const problems: string[] = [];
    const stored = (await built.ctx.pool.query<{ n: number }>('SELECT count(*)::int AS n FROM prelabels')).rows[0]?.n;
    if (stored !== work.distinct) problems.push(`${stored} prelabels stored, expected ${work.distinct}`);
    if ((outcomes.applied ?? 0) !== work.distinct) problems.push(`outcome applied ${outcomes.applied ?? 0}, expected ${work.distinct}`);
    if ((outcomes.duplicate ?? 0) !== work.duplicates) problems.push(`outcome duplicate ${outcomes.duplicate ?? 0}, expected ${work.duplicates}`);
    return { timed, outcomes, problems };
  } finally {
    await built.lifecycle.close();
  }
}

// ---------------------------------------------------------------- main

async function main(): Promise<number> {
  const startedAt = new Date();
  const commit = (() => {
    try {
      return execFileSync('git', ['rev-parse', 'HEAD'], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).trim();
    } catch {
      return 'unknown';
    }
  })();
  progress(`ingest bench: sections ${[...ONLY].join(', ')}; rows=${ROWS} (repeat ${REPEAT}) x ${ROUNDS} rounds, ceiling batch ${BATCH}, rss-lines=${RSS_LINES}, prelabel-events=${PRELABELS} (dups ${PRELABEL_DUPS}), strategy-items=${STRATEGY_ITEMS} x ${STRATEGY_CONCURRENCY} workers`);
  progress(`kafka=${BROKERS.join(',')} pg=${redactUrl(PG_URL)} redis=${REDIS_URL} topics=${PREFIX}.* databases=${DB_PREFIX}_* redis namespace=${NS}:*`);

  // Before any client exists: label-svc and the raw consumer share kafkajs, and both run with the fix.
  fixKafkajsIdleLoop();
  const kafka = new Kafka({ clientId: `bench-ingest-${RUN_ID}`, brokers: BROKERS, logLevel: logLevel.NOTHING });
  const admin = kafka.admin();
  await admin.connect();
  const pgAdmin = new pg.Client({ connectionString: PG_URL });
  await pgAdmin.connect();
  const redis = new Redis(REDIS_URL, { lazyConnect: true, maxRetriesPerRequest: 1 });
  await redis.connect();
  // kafkajs warns once per idempotent producer that createKafka's retry limit "may invalidate EoS
  // guarantees" (every label-svc round starts a DLQ producer and a publisher): counted, not printed.
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
  const logger = createLogger({ service: 'bench-ingest', level: LOG_LEVEL, destination });
  const found = findInfra({ pgUrl: PG_URL, brokers: BROKERS, redisUrl: REDIS_URL });
  const env: Env = { logger, pgAdmin, redis, admin, kafka, createdDbs: [], createdGroups: [], createdTopics: [], infra: found.targets };
  const problems: string[] = [];
  let failed: string | undefined;
  let task: ServiceProcess | undefined;
  let taskDb: pg.Pool | undefined;
  type CpuMs = Awaited<ReturnType<typeof withCpu>>['cpu'];
  const importRounds: { endpoint: EndpointRun; ceiling: CeilingRun; ratio: number; upkeepMs: number; cpu: { endpoint: CpuMs; upkeep: CpuMs; ceiling: CpuMs } }[] = [];
  let cpuFound: CpuTargets = {};
  let rss: { series: RssSeries; summary: ImportSummary; ms: number } | undefined;
  const prelabelRounds: { raw: Timed; label: LabelSvcRun; ratio: number; work: PrelabelWork }[] = [];
  const strategyRuns: StrategyRun[] = [];

  try {
    // ---- strategies (first: no service running beside them)
    if (runs('strategies')) {
      const db = `${DB_PREFIX}_strategies`;
      await pgAdmin.query(`CREATE DATABASE ${db}`);
      env.createdDbs.push(db);
      const pool = new pg.Pool({ connectionString: dbUrl(db), max: STRATEGY_CONCURRENCY });
      try {
        const senv = { pool, redis, namespace: `${NS}:strategies`, concurrency: STRATEGY_CONCURRENCY, keyTtlMs: KEY_TTL_MS };
        await prepareStrategies(senv);
        const order = [Strategy.unique, Strategy.token, Strategy.redisLua, Strategy.prealloc];
        const warm = strategyWorkload(Math.min(2_000, STRATEGY_ITEMS), REPEAT, SEED + 1, `w${RUN_ID}`);
        for (const s of order) await runStrategy(senv, s, warm, `warm_${s.replace('-', '_')}`);
        for (let round = 1; round <= ROUNDS; round++) {
          // New keys each round: every strategy sees the same fresh workload.
          const work = strategyWorkload(STRATEGY_ITEMS, REPEAT, SEED + round, `r${round}${RUN_ID}`);
          for (const s of round % 2 === 1 ? order : [...order].reverse()) {
            const r = await runStrategy(senv, s, work, `r${round}_${s.replace('-', '_')}`);
            strategyRuns.push(r);
            problems.push(...r.problems.map((p) => `strategies round ${round}: ${p}`));
            progress(`  strategy ${s.padEnd(10)} round ${round}: ${fmtRate(r.itemsPerSec).padStart(7)} items/s  p50 ${fmtMs(r.p50Ms)} ms  p99 ${fmtMs(r.p99Ms)} ms  written ${r.written} skipped ${r.skipped}${r.prepareMs > 1 ? `  (ids drawn in ${fmtMs(r.prepareMs)} ms)` : ''}`);
          }
        }
      } finally {
        await pool.end();
      }
    }

    // ---- import: the endpoint (task-svc process) vs the ceiling (same table shape, fresh copy)
    if (runs('import') || runs('rss')) {
      progress('building the services (scripts/build.mjs) and starting task-svc');
      await buildServices();
      task = await startTaskSvc(env);
      taskDb = new pg.Pool({ connectionString: dbUrl(`${DB_PREFIX}_task`), max: 1 });
      cpuFound = cpuTargets(task.child.pid, PG_URL, BROKERS);
      progress(`task-svc pid ${task.child.pid} at ${task.url}; CPU accounted for ${cpuColumnsFound(cpuFound).map((k) => CpuColumn[k]).join(', ')}, this process and the rest of the machine`);
    }
    if (runs('import') && task && taskDb) {
      const ceilingDb = `${DB_PREFIX}_ceiling`;
      await pgAdmin.query(`CREATE DATABASE ${ceilingDb}`);
      env.createdDbs.push(ceilingDb);
      const ceilingPool = new pg.Pool({ connectionString: dbUrl(ceilingDb), max: 2 });
      try {
        await migrate(ceilingPool, taskMigrations);
        // Warm-up, untimed: both paths once on a small file.
        const warmFile: ImportFileOptions = { lines: Math.min(5_000, ROWS), repeat: REPEAT, bad: 0, seed: SEED, tag: `warm-${RUN_ID}` };
        await runEndpoint(task, warmFile, taskDb);
        await vacuumTaskTables(taskDb);
        await runCeiling(ceilingPool, randomUUID(), warmFile, BATCH, 5);
        for (let round = 1; round <= ROUNDS; round++) {
          const file: ImportFileOptions = { lines: ROWS, repeat: REPEAT, bad: 0, seed: SEED + round, tag: `r${round}-${RUN_ID}` };
          const plan = planImportFile(file);
          // The endpoint's window runs until the relay has published the import's events: their CPU is the import's.
          const { result: endpoint, cpu: endpointCpu } = await withCpu(cpuFound, () => runEndpoint(task as ServiceProcess, file, taskDb as pg.Pool));
          const { result: upkeepMs, cpu: upkeepCpu } = await withCpu(cpuFound, () => vacuumTaskTables(taskDb as pg.Pool));
          const { result: ceiling, cpu: ceilingCpu } = await withCpu(cpuFound, () => runCeiling(ceilingPool, randomUUID(), file, BATCH, 6));
          if (ceiling.created !== plan.distinct) problems.push(`ceiling round ${round}: ${ceiling.created} rows created, expected ${plan.distinct}`);
          problems.push(...endpoint.problems.map((p) => `endpoint round ${round}: ${p}`));
          const eRate = (ROWS / endpoint.ms) * 1000;
          const cRate = (ROWS / ceiling.ms) * 1000;
          importRounds.push({ endpoint, ceiling, ratio: eRate / cRate, upkeepMs, cpu: { endpoint: endpointCpu, upkeep: upkeepCpu, ceiling: ceilingCpu } });
          progress(
            `  import round ${round}: endpoint ${fmtRate(eRate)} rows/s (${(endpoint.ms / 1000).toFixed(1)} s, ${endpoint.batches} batches, p99 ≤ ${fmtMs(endpoint.p99BatchMsBound)} ms, relay done ${fmtMs(endpoint.relayLagMs)} ms later)  ` +
              `ceiling ${fmtRate(cRate)} rows/s (${(ceiling.ms / 1000).toFixed(1)} s, p99 ${fmtMs(percentile([...ceiling.batchMs].sort((a, b) => a - b), 99))} ms)  ratio ${fmtX(eRate / cRate)}`,
          );
          progress(`    CPU ms per 1,000 lines, endpoint: ${cpuLine(endpointCpu, ROWS)}; its tables' VACUUM (${fmtMs(upkeepMs)} ms): ${cpuLine(upkeepCpu, ROWS)}; ceiling: ${cpuLine(ceilingCpu, ROWS)}`);
        }
      } finally {
        await ceilingPool.end();
      }
    }

    // ---- RSS of task-svc while a large file streams in
    if (runs('rss') && task?.child.pid && taskDb) {
      const db = taskDb;
      const file: ImportFileOptions = { lines: RSS_LINES, repeat: REPEAT, bad: 0, seed: SEED + 100, tag: `rss-${RUN_ID}` };
      progress(`  rss: streaming ${RSS_LINES} lines into task-svc (pid ${task.child.pid}), sampling VmRSS every 100 ms`);
      const { result, series } = await sampleRss(task.child.pid, 100, () => runEndpoint(task as ServiceProcess, file, db));
      problems.push(...result.problems.map((p) => `rss import: ${p}`));
      rss = { series, summary: result.summary, ms: result.ms };
      progress(`  rss: before ${mb(series.before)}, peak ${mb(series.peak)}, after ${mb(series.after)} over ${(result.ms / 1000).toFixed(1)} s`);
    }
    if (task) {
      await task.stop();
      task = undefined;
      await taskDb?.end();
      taskDb = undefined;
    }

    // ---- pre-labels: label-svc's consumer vs a raw kafkajs consumer of the same messages
    if (runs('prelabels')) {
      const m = prelabelMessages();
      progress(`  prelabels: ${m.messages.length} messages per round (${m.messages.length - m.distinct} exact duplicates), each round on topics of its own`);
      for (let round = 1; round <= ROUNDS + 1; round++) {
        const work = await producePrelabels(env, `${PREFIX}-r${round}`, m);
        if (round === 1) await runRawConsumer(env, work, 'warm');
        const raw = await runRawConsumer(env, work, `r${round}`);
        const label = await runLabelSvc(env, work, `r${round}`);
        // Round 1 warms label-svc's code paths (JIT, first connections): reported, not counted.
        if (round > 1) {
          problems.push(...label.problems.map((p) => `prelabels round ${round - 1}: ${p}`));
          prelabelRounds.push({ raw, label, ratio: raw.ms / label.timed.ms, work });
        }
        progress(`  prelabels round ${round}${round === 1 ? ' (warm-up)' : ''}: raw ${fmtRate((work.total / raw.ms) * 1000)} events/s, label-svc ${fmtRate((work.total / label.timed.ms) * 1000)} events/s ${JSON.stringify(label.outcomes)}; node ${(label.timed.nodeCpuUs / work.total).toFixed(1)} µs + ${fmtInfra(label.timed.infraMs, work.total, 'event')}`);
      }
    }
  } catch (error) {
    failed = error instanceof Error ? `${error.name}: ${error.message}` : String(error);
    progress(`bench failed: ${failed}`);
  } finally {
    if (task) await task.kill().catch(() => undefined);
    await taskDb?.end().catch(() => undefined);
    await cleanup(env);
  }

  // ---------------------------------------------------------------- report
  const out: string[] = [];
  const met = (ok: boolean | undefined) => (ok === undefined ? 'n/a' : ok ? 'yes' : 'no');
  let importRatio = NaN;
  if (importRounds.length > 0) {
    const e = importRounds.map((r) => (ROWS / r.endpoint.ms) * 1000);
    const c = importRounds.map((r) => (ROWS / r.ceiling.ms) * 1000);
    importRatio = median(importRounds.map((r) => r.ratio));
    const cBatches = importRounds.flatMap((r) => r.ceiling.batchMs).sort((a, b) => a - b);
    out.push(
      `### Bulk import: ${ROWS.toLocaleString('en-US')} lines, ${Math.round(REPEAT * 100)}% repeated (median of ${importRounds.length})`,
      '',
      '| Contender | Rows/s | Range | Ratio | p99 per batch | Target | Met? |',
      '|---|---:|---:|---:|---:|---|---|',
      `| Ceiling: \`INSERT … SELECT unnest(…) ON CONFLICT DO NOTHING\`, ${BATCH} rows per statement, no HTTP, no outbox | ${fmtRate(median(c))} | ${range(c)} | 1.00x | ${fmtMs(percentile(cBatches, 99))} ms | ceiling | — |`,
      `| task-svc \`POST /projects/:id/tasks/import\` (streamed NDJSON, batches with outbox) | ${fmtRate(median(e))} | ${range(e)} | ${fmtX(importRatio)} | ≤ ${fmtMs(Math.max(...importRounds.map((r) => r.endpoint.p99BatchMsBound)))} ms | ≥ ${IMPORT_TARGET}x | ${met(importRatio >= IMPORT_TARGET)} |`,
      '',
      `CPU ms per 1,000 lines (median of ${importRounds.length}; the endpoint's window lasts until task-svc's relay has published the import's events; n/a: not a local process):`,
      '',
      `| Contender | ${CPU_COLUMNS.map((c) => CpuColumn[c]).join(' | ')} | machine busy |`,
      `|---|${CPU_COLUMNS.map(() => '---:').join('|')}|---:|`,
      ...(['ceiling', 'endpoint', 'upkeep'] as const).map((side) => {
        const perK = (pick: (cpu: CpuMs) => number | undefined) => {
          const xs = importRounds.map((r) => pick(r.cpu[side])).filter((x): x is number => x !== undefined);
          return xs.length === importRounds.length ? fmtMs((median(xs) * 1000) / ROWS) : 'n/a';
        };
        const label = { ceiling: 'Ceiling', endpoint: 'task-svc endpoint', upkeep: `then VACUUM (ANALYZE) of its tables (median ${fmtMs(median(importRounds.map((r) => r.upkeepMs)))} ms, before the ceiling)` }[side];
        return `| ${label} | ${CPU_COLUMNS.map((c) => perK((cpu) => cpu[c])).join(' | ')} | ${perK((cpu) => cpu.busy)} |`;
      }),
      '',
    );
  }
  if (rss) {
    out.push(
      `### task-svc resident memory while ${RSS_LINES.toLocaleString('en-US')} lines stream in`,
      '',
      '| Before | Peak (VmRSS, sampled every 100 ms) | After | Lines/s | Target | Met? |',
      '|---:|---:|---:|---:|---|---|',
      `| ${mb(rss.series.before)} | ${mb(rss.series.peak)} | ${mb(rss.series.after)} | ${fmtRate((RSS_LINES / rss.ms) * 1000)} | < 300 MB | ${met(rss.series.peak < RSS_TARGET_BYTES)} |`,
      '',
    );
  }
  let prelabelRatio = NaN;
  if (prelabelRounds.length > 0) {
    const raw = prelabelRounds.map((r) => (r.work.total / r.raw.ms) * 1000);
    const lab = prelabelRounds.map((r) => (r.work.total / r.label.timed.ms) * 1000);
    prelabelRatio = median(prelabelRounds.map((r) => r.ratio));
    const w = prelabelRounds[0]?.work;
    out.push(
      `### Pre-label ingest: ${w?.total.toLocaleString('en-US')} messages, ${w?.duplicates.toLocaleString('en-US')} exact duplicates (median of ${prelabelRounds.length})`,
      '',
      '| Contender | Events/s | Range | Ratio | Target | Met? |',
      '|---|---:|---:|---:|---|---|',
      `| Raw kafkajs consumer (no-op eachBatch) | ${fmtRate(median(raw))} | ${range(raw)} | 1.00x | ceiling | — |`,
      `| label-svc consumer: exactly-once shell, dedup gate, prelabels stored | ${fmtRate(median(lab))} | ${range(lab)} | ${fmtX(prelabelRatio)} | ≥ ${PRELABEL_TARGET}x | ${met(prelabelRatio >= PRELABEL_TARGET)} |`,
      '',
    );
  }
  if (strategyRuns.length > 0) {
    const order = [Strategy.unique, Strategy.token, Strategy.redisLua, Strategy.prealloc];
    const rows = order.map((s) => {
      const rs = strategyRuns.filter((r) => r.strategy === s);
      return { s, rate: median(rs.map((r) => r.itemsPerSec)), p99: median(rs.map((r) => r.p99Ms)), rates: rs.map((r) => r.itemsPerSec) };
    });
    const ours = [...rows].sort((a, b) => b.rate - a.rate).map((r) => r.s);
    const seedRank = order.filter((s) => seedFigures[s].qps !== null).sort((a, b) => (seedFigures[b].qps ?? 0) - (seedFigures[a].qps ?? 0));
    out.push(
      `### Idempotency strategies: ${STRATEGY_ITEMS.toLocaleString('en-US')} items, ${Math.round(REPEAT * 100)}% duplicates, ${STRATEGY_CONCURRENCY} workers (median of ${ROUNDS})`,
      '',
      '| Strategy | Items/s | Range | p99 per item | Rank (ours) | Material: QPS | Material: P99 |',
      '|---|---:|---:|---:|---:|---:|---:|',
      ...rows.map(
        (r) =>
          `| ${strategyLabels[r.s]} | ${fmtRate(r.rate)} | ${range(r.rates)} | ${fmtMs(r.p99)} ms | ${ours.indexOf(r.s) + 1} | ${seedFigures[r.s].qps === null ? '—' : fmtRate(seedFigures[r.s].qps ?? NaN)} | ${seedFigures[r.s].p99Ms === null ? '—' : `${seedFigures[r.s].p99Ms} ms`} |`,
      ),
      '',
      `Ranking by throughput, ours: ${ours.join(' > ')}. The material's (where it gives a throughput): ${seedRank.join(' > ')}; ` +
        `${ours.filter((s) => seedRank.includes(s)).join(' > ') === seedRank.join(' > ') ? 'the same order' : 'a different order'} for those.`,
      '',
    );
  }
  console.log(`\n${out.join('\n')}`);
  if (importRounds.length > 0) console.log(`RATIO import endpoint ÷ ceiling: ${fmtX(importRatio)} (target ≥ ${IMPORT_TARGET}x) → ${importRatio >= IMPORT_TARGET ? 'PASS' : 'MISS'}  [per round: ${importRounds.map((r) => r.ratio.toFixed(3)).join(', ')}]`);
  if (rss) console.log(`RSS peak ${mb(rss.series.peak)} (target < 300 MB) → ${rss.series.peak < RSS_TARGET_BYTES ? 'PASS' : 'MISS'}`);
  if (prelabelRounds.length > 0) console.log(`RATIO pre-label ingest ÷ raw: ${fmtX(prelabelRatio)} (target ≥ ${PRELABEL_TARGET}x) → ${prelabelRatio >= PRELABEL_TARGET ? 'PASS' : 'MISS'}  [per round: ${prelabelRounds.map((r) => r.ratio.toFixed(3)).join(', ')}]`);
  // The raw consumer's infrastructure share is only the broker's; label-svc's window has all three.
  const prelabelFloor = prelabelRounds.length > 0 ? cpuFloor(prelabelRounds.map((r) => r.label.timed), prelabelRounds.map((r) => r.raw), prelabelRounds[0]?.work.total ?? 1) : undefined;
  if (prelabelFloor && Number.isFinite(prelabelFloor.infraUsPerEvent)) console.log(`pre-label ${describeFloor(prelabelFloor, median(prelabelRounds.map((r) => (r.work.total / r.raw.ms) * 1000)), prelabelRounds[0]?.work.total ?? 1)}`);
  if (failed) console.log(`NOTE the run stopped early: ${failed}`);
  if (eosWarnings > 0) progress(`note: kafkajs warned ${eosWarnings} times "Limiting retries for the idempotent producer may invalidate EoS guarantees" (createKafka sets retries: 8; not printed)`);
  if (problems.length > 0) console.log(`\n!!! CORRECTNESS FAILURE (${problems.length} problem(s)); the numbers of those contenders are not valid:\n  ${problems.join('\n  ')}`);

  const dir = join(dirname(fileURLToPath(import.meta.url)), 'results');
  mkdirSync(dir, { recursive: true });
  const file = join(dir, `ingest-${startedAt.toISOString().replace(/[:.]/g, '-')}.json`);
  writeFileSync(
    file,
    JSON.stringify(
      {
        startedAt: startedAt.toISOString(),
        command: `npm run bench:ingest -- ${process.argv.slice(2).join(' ')}`.trim(),
        commit,
        args: { rows: ROWS, repeat: REPEAT, rounds: ROUNDS, batch: BATCH, rssLines: RSS_LINES, prelabelEvents: PRELABELS, prelabelDuplicates: PRELABEL_DUPS, partitions: PARTITIONS, strategyItems: STRATEGY_ITEMS, strategyConcurrency: STRATEGY_CONCURRENCY, only: [...ONLY], seed: SEED },
        machine: { cpus: os.cpus().length, cpuModel: os.cpus()[0]?.model, totalMemBytes: os.totalmem(), node: process.version, loadavg: os.loadavg() },
        import: importRounds.map((r) => ({
          endpoint: { rowsPerSec: (ROWS / r.endpoint.ms) * 1000, ms: r.endpoint.ms, relayLagMs: r.endpoint.relayLagMs, batches: r.endpoint.batches, p99BatchMsBucketBound: r.endpoint.p99BatchMsBound, summary: { ...r.endpoint.summary, errors: r.endpoint.summary.errors.length } },
          ceiling: { rowsPerSec: (ROWS / r.ceiling.ms) * 1000, ms: r.ceiling.ms, created: r.ceiling.created, batches: r.ceiling.batchMs.length, p99BatchMs: percentile([...r.ceiling.batchMs].sort((a, b) => a - b), 99) },
          ratio: r.ratio,
          upkeepMs: r.upkeepMs,
          cpuMs: r.cpu,
        })),
        rss: rss ? { before: rss.series.before, peak: rss.series.peak, after: rss.series.after, ms: rss.ms, samples: rss.series.samples, targetBytes: RSS_TARGET_BYTES } : null,
        prelabels: prelabelRounds.map((r) => ({ raw: { eventsPerSec: (r.work.total / r.raw.ms) * 1000, ...r.raw }, labelSvc: { eventsPerSec: (r.work.total / r.label.timed.ms) * 1000, ...r.label.timed, outcomes: r.label.outcomes }, ratio: r.ratio })),
        strategies: strategyRuns,
        seedFigures,
        summary: {
          importRatio: { value: importRatio, target: IMPORT_TARGET, met: importRatio >= IMPORT_TARGET },
          rssPeakBytes: rss?.series.peak ?? null,
          prelabelRatio: { value: prelabelRatio, target: PRELABEL_TARGET, met: prelabelRatio >= PRELABEL_TARGET },
          prelabelCpuFloor: prelabelFloor ?? null,
          correct: problems.length === 0,
          problems,
          ...(failed ? { stoppedEarly: failed } : {}),
        },
        // CLOCK_MONOTONIC µs, the clock of .cpuprofile timestamps: bench/profile-summary.ts cuts a profile to them.
        profileWindowsUs: {
          prelabelsRaw: prelabelRounds.map((r) => r.raw.windowUs),
          prelabels: prelabelRounds.map((r) => r.label.timed.windowUs),
        },
        tables: out.join('\n'),
      },
      null,
      2,
    ) + '\n',
  );
  console.log(`\nresults: ${file}`);
  const ranSomething = importRounds.length + strategyRuns.length + prelabelRounds.length > 0 || rss !== undefined;
  return !ranSomething || failed || problems.length > 0 ? 1 : 0;
}

async function cleanup(env: Env): Promise<void> {
  const step = async (what: string, work: () => Promise<unknown>) => {
    try {
      await work();
    } catch (error) {
      progress(`cleanup: ${what} failed: ${(error as Error).message}`);
    }
  };
  let removed = 0;
  // The bench's own keys, and the dedup keys of the services it ran (their namespace follows the prefix).
  for (const pattern of [`${NS}:*`, `lf:dedup:${PREFIX}*`]) {
    await step(`redis keys ${pattern}`, async () => {
      let cursor = '0';
      do {
        const [next, keys] = await env.redis.scan(cursor, 'MATCH', pattern, 'COUNT', 1000);
        cursor = next;
        if (keys.length > 0) removed += await env.redis.unlink(...keys);
      } while (cursor !== '0');
    });
  }
  await step('consumer groups', async () => {
    const groups = (await env.admin.listGroups()).groups.map((g) => g.groupId).filter((g) => g.startsWith(PREFIX));
    if (groups.length > 0) await env.admin.deleteGroups(groups);
  });
  await step('topics', async () => {
    const topics = (await env.admin.listTopics()).filter((t) => t.startsWith(PREFIX));
    if (topics.length > 0) await env.admin.deleteTopics({ topics });
  });
  for (const db of env.createdDbs) await step(`drop database ${db}`, () => env.pgAdmin.query(`DROP DATABASE IF EXISTS ${db} WITH (FORCE)`));
  progress(`cleanup: unlinked ${removed} keys under ${NS}:*, deleted the ${PREFIX}.* topics and groups, dropped ${env.createdDbs.length} databases`);
  await step('redis', () => env.redis.quit());
  await step('kafka admin', () => env.admin.disconnect());
  await step('pg admin', () => env.pgAdmin.end());
}

runBench('ingest', main);
