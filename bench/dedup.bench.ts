// Dedup tier benchmark: the Redis Lua tier, the PostgreSQL inbox, the Bloom filter, a raw pipelined
// SET NX ceiling and the Powertools idempotency utility as a peer, in one run on the same Redis and
// PostgreSQL. Every check is of a fresh key (the first-delivery path, which is the common one).
//   npm run bench:dedup -- --keys 20000 --batch 100 --concurrency 16 --batch-concurrency 1 --rounds 3
// Env: REDIS_URL (default redis://127.0.0.1:6379), PG_URL (default postgres://postgres@127.0.0.1:5432/postgres).
// Uses its own Redis key namespace (removed by SCAN + UNLINK at the end, never FLUSHDB) and a fresh
// PostgreSQL database (dropped at the end). Exit code is 0 whatever the targets say (1 only if
// the bench itself could not run, e.g. Redis or PostgreSQL unreachable).
import { randomUUID } from 'node:crypto';
import { mkdirSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { Redis } from 'ioredis';
import pg from 'pg';
import { createClient } from '@redis/client';
import { IdempotencyConfig, makeIdempotent } from '@aws-lambda-powertools/idempotency';
import { CachePersistenceLayer } from '@aws-lambda-powertools/idempotency/cache';
import { BloomFilter, createRedisTier, DedupConfigShape, formatKey, inboxMigrationSql, RecentKeys, recordInInbox, recordManyInInbox, RedisVerdict, type DedupKey, type InboxEntry } from '@labelflow/dedup';
import { fmtRate, median, percentile, positiveInt, redactUrl, runBench } from './common';

const { values: args } = parseArgs({
  options: {
    keys: { type: 'string', default: '20000' },
    batch: { type: 'string', default: '100' },
    concurrency: { type: 'string', default: '16' },
    'batch-concurrency': { type: 'string', default: '1' },
    rounds: { type: 'string', default: '3' },
    help: { type: 'boolean', default: false },
  },
});
if (args.help) {
  console.log('npm run bench:dedup -- [--keys N=20000] [--batch B=100] [--concurrency C=16] [--batch-concurrency BC=1] [--rounds R=3]');
  process.exit(0);
}

const N = positiveInt('keys', args.keys);
const B = positiveInt('batch', args.batch);
const C = positiveInt('concurrency', args.concurrency);
const BC = positiveInt('batch-concurrency', args['batch-concurrency']);
/** Every contender runs R times, interleaved (round 1 of all, then round 2 of all…), so noise from a shared machine spreads over all of them. */
const R = positiveInt('rounds', args.rounds);
const REDIS_URL = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';
const PG_URL = process.env.PG_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';
/** PostgreSQL per message is the slow one (a WAL flush per key): N keys in all, split over the rounds. */
const PG_KEYS_PER_ROUND = Math.max(1, Math.ceil(N / R));
const WARMUP = Math.min(2_000, Math.max(200, Math.floor(N / 10)));
const LEASE_MS = 60_000;
const TTL_MS = 600_000; // every bench key expires by itself even if the cleanup never runs
const RUN_ID = `${Date.now().toString(36)}${randomUUID().slice(0, 6)}`;
const NS = `lf:bench:dedup:${RUN_ID}`;
const DB_NAME = `lf_bench_dedup_${RUN_ID}`.toLowerCase();
const EVENT_TYPE = 'LabelSubmitted';

// ---------------------------------------------------------------- measurement

interface Result {
  readonly id: string;
  readonly contender: string;
  /** What one latency sample is: one key (per message) or one batch of B keys. */
  readonly unit: 'key' | 'batch';
  readonly concurrency: number;
  readonly keysPerRound: number;
  readonly opsPerRound: number;
  /** Keys checked per second, whatever the unit: the median round. */
  readonly keysPerSec: number;
  /** Keys per second of every round, in run order. */
  readonly keysPerSecRounds: number[];
  /** Latency per unit, over the samples of all rounds. */
  readonly p50Ms: number;
  readonly p99Ms: number;
  readonly roundTrips: string;
  /** CPU per key, microseconds: this Node process (client side), and the Redis server (Redis contenders). */
  readonly nodeCpuUsPerKey: number;
  readonly redisCpuUsPerKey?: number;
  readonly informational?: boolean;
  readonly notes?: string[];
}

interface Skipped {
  readonly id: string;
  readonly contender: string;
  readonly skipped: string;
}

const results: (Result | Skipped)[] = [];
const batchedVsCeiling: number[] = [];
const batchedVsPeer: number[] = [];
const isResult = (r: Result | Skipped | undefined): r is Result => r !== undefined && 'keysPerSec' in r;


/** Runs `count` ops with `concurrency` in flight; each op's latency is recorded. */
async function runOps(count: number, concurrency: number, op: (i: number) => Promise<void>): Promise<{ latencies: Float64Array; elapsedMs: number }> {
  const latencies = new Float64Array(count);
  let next = 0;
  const worker = async () => {
    for (;;) {
      const i = next++;
      if (i >= count) return;
      const t0 = performance.now();
      await op(i);
      latencies[i] = performance.now() - t0;
    }
  };
  const start = performance.now();
  await Promise.all(Array.from({ length: Math.min(concurrency, count) }, worker));
  return { latencies, elapsedMs: performance.now() - start };
}

interface Pass {
  readonly op: (i: number) => Promise<void>;
  /** After the pass: a note if something is off (e.g. not every fresh key was reported fresh). */
  readonly verify?: () => string | undefined;
}

interface Spec {
  readonly id: string;
  readonly contender: string;
  readonly unit: 'key' | 'batch';
  readonly concurrency: number;
  readonly roundTrips: string;
  readonly informational?: boolean;
  /** Counts Redis server CPU for this contender (INFO cpu, before and after each round). */
  readonly redisCpu?: boolean;
  /** Keys per round when not N (the PostgreSQL contenders split N over the rounds to keep the run short). */
  readonly keysPerRound?: number;
  /** One-time setup (connections); a failure here marks the contender as not run. */
  readonly setup?: () => Promise<void>;
  /** Returns the op over `keys` (index = key for per-key units, batch number for batches). */
  prepare(keys: readonly DedupKey[]): Pass;
}

interface State {
  readonly spec: Spec;
  failed?: string;
  readonly rounds: number[];
  readonly latencies: Float64Array[];
  readonly notes: Set<string>;
  /** Node process CPU (user+system) and Redis server CPU, microseconds, summed over the rounds. */
  cpuUs: number;
  redisCpuUs: number;
  keysMeasured: number;
}

let redisCpuProbe: () => Promise<number> = async () => 0;

async function runRound(state: State, round: number): Promise<void> {
  const { spec } = state;
  if (state.failed) return;
  const perBatch = spec.unit === 'batch' ? B : 1;
  try {
    if (round === 0) {
      await spec.setup?.();
      const warmKeys = makeKeys(Math.max(WARMUP, perBatch * 5));
      await runOps(Math.ceil(warmKeys.length / perBatch), spec.concurrency, spec.prepare(warmKeys).op);
    }
    const n = spec.keysPerRound ?? N;
    const keys = makeKeys(n);
    const pass = spec.prepare(keys);
    const redisCpu0 = spec.redisCpu ? await redisCpuProbe() : 0;
    const cpu0 = process.cpuUsage();
    const { latencies, elapsedMs } = await runOps(Math.ceil(n / perBatch), spec.concurrency, pass.op);
    const cpu = process.cpuUsage(cpu0);
    state.cpuUs += cpu.user + cpu.system;
    if (spec.redisCpu) state.redisCpuUs += (await redisCpuProbe()) - redisCpu0;
    state.keysMeasured += n;
    const note = pass.verify?.();
    if (note) state.notes.add(note);
    const rate = (n / elapsedMs) * 1000;
    state.rounds.push(rate);
    state.latencies.push(latencies);
    const sorted = latencies.slice().sort();
    console.log(
      `  r${round + 1} ${spec.contender.padEnd(52)} ${fmtRate(rate).padStart(10)} keys/s  p50 ${fmtMs(percentile(sorted, 50))}  p99 ${fmtMs(percentile(sorted, 99))} per ${spec.unit}` +
        `  node cpu ${((cpu.user + cpu.system) / n).toFixed(1)} µs/key${note ? `  (${note})` : ''}`,
    );
  } catch (error) {
    state.failed = error instanceof Error ? `${error.name}: ${error.message}` : String(error);
    console.log(`  r${round + 1} ${spec.contender.padEnd(52)} FAILED: ${state.failed}`);
  }
}

function summarize(state: State): Result | Skipped {
  const { spec } = state;
  if (state.failed || state.rounds.length === 0) return { id: spec.id, contender: spec.contender, skipped: state.failed ?? 'no round completed' };
  const all = new Float64Array(state.latencies.reduce((n, l) => n + l.length, 0));
  let at = 0;
  for (const l of state.latencies) {
    all.set(l, at);
    at += l.length;
  }
  all.sort();
  return {
    id: spec.id,
    contender: spec.contender,
    unit: spec.unit,
    concurrency: spec.concurrency,
    keysPerRound: spec.keysPerRound ?? N,
    opsPerRound: Math.ceil((spec.keysPerRound ?? N) / (spec.unit === 'batch' ? B : 1)),
    keysPerSec: median(state.rounds),
    keysPerSecRounds: state.rounds,
    p50Ms: percentile(all, 50),
    p99Ms: percentile(all, 99),
    roundTrips: spec.roundTrips,
    nodeCpuUsPerKey: state.cpuUs / state.keysMeasured,
    ...(spec.redisCpu ? { redisCpuUsPerKey: state.redisCpuUs / state.keysMeasured } : {}),
    ...(spec.informational ? { informational: true } : {}),
    ...(state.notes.size > 0 ? { notes: [...state.notes] } : {}),
  };
}

function makeKeys(n: number): DedupKey[] {
  return Array.from({ length: n }, () => ({ taskId: randomUUID(), eventType: EVENT_TYPE, attempt: 1 }));
}

function at<T>(items: readonly T[], i: number): T {
  const item = items[i];
  if (item === undefined) throw new RangeError(`index ${i} out of ${items.length}`);
  return item;
}

const redisKey = (k: DedupKey) => `${NS}:${formatKey(k)}`; // the gate's key scheme
const entryOf = (k: DedupKey, i: number): InboxEntry => ({ ...k, eventId: randomUUID(), source: `labelflow.bench/0@${i}` });
const batchOf = <T>(items: readonly T[], b: number): T[] => items.slice(b * B, b * B + B);

function fmtMs(ms: number): string {
  if (!Number.isFinite(ms)) return 'n/a';
  if (ms < 0.1) return `${(ms * 1000).toFixed(1)} µs`;
  if (ms < 10) return `${ms.toFixed(2)} ms`;
  return `${ms.toFixed(1)} ms`;
}

// ---------------------------------------------------------------- bloom memory

const gc: () => void = (() => {
  setFlagsFromString('--expose-gc');
  return runInNewContext('gc') as () => void;
})();

function memory() {
  gc();
  gc();
  const m = process.memoryUsage();
  return { heapUsed: m.heapUsed, rss: m.rss, arrayBuffers: m.arrayBuffers, external: m.external };
}

const mib = (bytes: number) => `${(bytes / 1024 / 1024).toFixed(2)} MiB`;

// ---------------------------------------------------------------- main

async function main(): Promise<number> {
  const startedAt = new Date();
  const bloomCapacity = DedupConfigShape.DEDUP_BLOOM_CAPACITY.parse(process.env.DEDUP_BLOOM_CAPACITY);
  const bloomErrorRate = DedupConfigShape.DEDUP_BLOOM_ERROR_RATE.parse(process.env.DEDUP_BLOOM_ERROR_RATE);
  console.log(`dedup bench: keys=${N} per round, rounds=${R}, batch=${B}, per-message concurrency=${C}, batch concurrency=${BC}, warm-up=${WARMUP} keys per contender`);
  console.log(`redis=${REDIS_URL} pg=${redactUrl(PG_URL)} namespace=${NS} database=${DB_NAME}`);

  // Bloom memory first, on a quiet heap: one generation as RecentKeys allocates it, then a second
  // filter of the same size, which is what RecentKeys holds after its first rotation (steady state).
  // The probe keys below, and one pass of the hashing code over them on a small filter, come before
  // the baseline so that neither the keys nor V8's code and heap growth are counted as the filter's.
  const probe = Array.from({ length: 5_000 }, () => formatKey({ taskId: randomUUID(), eventType: EVENT_TYPE, attempt: 1 }));
  const jitWarm = new BloomFilter(probe.length, bloomErrorRate);
  for (const id of probe) jitWarm.add(id);
  const m0 = memory();
  const recent = new RecentKeys({ capacity: bloomCapacity, errorRate: bloomErrorRate });
  const m1 = memory();
  const secondGeneration = new BloomFilter(bloomCapacity, bloomErrorRate);
  const m2 = memory();
  // The bit arrays are zero-filled lazily by the OS: RSS grows as bits get set, not at allocation.
  // A few thousand adds (7 bits each, spread at random) touch every page of both generations.
  for (const id of probe) {
    recent.add(id);
    secondGeneration.add(id);
  }
  const m3 = memory();
  const delta = (a: ReturnType<typeof memory>, b: ReturnType<typeof memory>) => ({
    heapUsed: b.heapUsed - a.heapUsed,
    arrayBuffers: b.arrayBuffers - a.arrayBuffers,
    rss: b.rss - a.rss,
  });
  const bloomMemory: {
    capacity: number;
    errorRate: number;
    bits: number;
    hashes: number;
    oneGeneration: ReturnType<typeof delta>;
    twoGenerations: ReturnType<typeof delta>;
    pagesTouched: { keysAddedPerGeneration: number } & ReturnType<typeof delta>;
    falsePositivesOnFreshKeys?: number;
  } = {
    capacity: bloomCapacity,
    errorRate: bloomErrorRate,
    bits: secondGeneration.bits,
    hashes: secondGeneration.hashes,
    oneGeneration: delta(m0, m1),
    twoGenerations: delta(m0, m2),
    pagesTouched: { keysAddedPerGeneration: probe.length, ...delta(m0, m3) },
  };
  console.log(
    `bloom memory @ capacity ${bloomCapacity.toLocaleString('en-US')}, error rate ${bloomErrorRate}: ` +
      `one generation heapUsed +${mib(bloomMemory.oneGeneration.heapUsed)}, arrayBuffers +${mib(bloomMemory.oneGeneration.arrayBuffers)}, RSS +${mib(bloomMemory.oneGeneration.rss)}; ` +
      `two generations (steady state) heapUsed +${mib(bloomMemory.twoGenerations.heapUsed)}, arrayBuffers +${mib(bloomMemory.twoGenerations.arrayBuffers)}, RSS +${mib(bloomMemory.twoGenerations.rss)}; ` +
      `two generations after ${probe.length.toLocaleString('en-US')} adds each (pages resident) heapUsed +${mib(bloomMemory.pagesTouched.heapUsed)}, arrayBuffers +${mib(bloomMemory.pagesTouched.arrayBuffers)}, RSS +${mib(bloomMemory.pagesTouched.rss)}`,
  );

  const redis = new Redis(REDIS_URL, { lazyConnect: true, maxRetriesPerRequest: 1 });
  await redis.connect();
  const redisVersion = /redis_version:(\S+)/.exec(await redis.info('server'))?.[1] ?? 'unknown';
  // Redis server CPU (user + sys, all clients: the Redis is shared, so this is approximate).
  redisCpuProbe = async () => {
    const info = await redis.info('cpu');
    const read = (name: string) => Number(new RegExp(`${name}:([0-9.]+)`).exec(info)?.[1] ?? NaN);
    return (read('used_cpu_user') + read('used_cpu_sys')) * 1e6;
  };
  const admin = new pg.Client({ connectionString: PG_URL });
  await admin.connect();
  const pgVersion = (await admin.query<{ v: string }>('SHOW server_version')).rows[0]?.v ?? 'unknown';
  await admin.query(`CREATE DATABASE ${DB_NAME}`);
  const dbUrl = new URL(PG_URL);
  dbUrl.pathname = `/${DB_NAME}`;
  const pool = new pg.Pool({ connectionString: dbUrl.toString(), max: Math.max(C, BC) });
  // DROP DATABASE … WITH (FORCE) at the end terminates idle pooled connections: not an error here.
  pool.on('error', () => undefined);
  let ptClient: { quit(): Promise<unknown> } | undefined;

  try {
    await pool.query(inboxMigrationSql);
    const tier = createRedisTier({ redis, doneTtlMs: TTL_MS, timeoutMs: 5_000 });
    const fresh = (expected: number) => {
      let n = 0;
      return { add: (k = 1) => (n += k), verify: () => (n === expected ? undefined : `only ${n}/${expected} keys reported fresh`) };
    };

    // Powertools: idempotency utility with its cache (Redis) persistence layer, node-redis client.
    let handle: ((key: DedupKey) => Promise<unknown>) | undefined;
    let executed = 0;

    let falsePositives = 0;
    const specs: Spec[] = [
      {
        // 1. Redis Lua tier, one key per check.
        id: 'redis-tier-per-message',
        contender: 'Redis Lua tier, check([key])',
        unit: 'key',
        concurrency: C,
        roundTrips: '1 EVALSHA per key',
        redisCpu: true,
        prepare: (keys) => {
          const f = fresh(keys.length);
          return {
            op: async (i) => {
              const [v] = await tier.check([redisKey(at(keys, i))]);
              if (v === RedisVerdict.unknown) f.add();
            },
            verify: f.verify,
          };
        },
      },
      {
        // 2. Redis Lua tier, B keys per check.
        id: 'redis-tier-batched',
        contender: `Redis Lua tier, check(${B} keys)`,
        unit: 'batch',
        concurrency: BC,
        roundTrips: '1 EVALSHA per batch',
        redisCpu: true,
        prepare: (keys) => {
          const f = fresh(keys.length);
          return {
            op: async (b) => {
              const verdicts = await tier.check(batchOf(keys, b).map(redisKey));
              f.add(verdicts.filter((v) => v === RedisVerdict.unknown).length);
            },
            verify: f.verify,
          };
        },
      },
      {
        // 6. Ceiling: raw pipelined SET NX PX, B per pipeline, on the same ioredis connection.
        id: 'raw-set-nx-pipeline',
        contender: `Ceiling: pipelined SET NX PX (${B} per pipeline)`,
        unit: 'batch',
        concurrency: BC,
        roundTrips: '1 pipeline (B SETs) per batch',
        redisCpu: true,
        prepare: (keys) => {
          const f = fresh(keys.length);
          return {
            op: async (b) => {
              const pipeline = redis.pipeline();
              for (const k of batchOf(keys, b)) pipeline.set(redisKey(k), '1', 'PX', TTL_MS, 'NX');
              for (const [err, reply] of (await pipeline.exec()) ?? []) {
                if (err) throw err;
                if (reply === 'OK') f.add();
              }
            },
            verify: f.verify,
          };
        },
      },
      {
        // 7. Peer: Powertools idempotency, makeIdempotent around a trivial async function.
        id: 'powertools-idempotency',
        contender: 'Peer: Powertools idempotency (cache layer)',
        unit: 'key',
        concurrency: C,
        roundTrips: '2 per key (SET NX EX in-progress, SET EX completed)',
        redisCpu: true,
        setup: async () => {
          const client = await createClient({ url: REDIS_URL }).connect();
          ptClient = client;
          const persistenceStore = new CachePersistenceLayer({ client });
          const config = new IdempotencyConfig({ expiresAfterSeconds: TTL_MS / 1000 });
          // Outside Lambda there is no context; this gives the in-progress record the same lease as
          // the Redis tier (and silences the per-call "could not determine remaining time" warning).
          config.registerLambdaContext({ getRemainingTimeInMillis: () => LEASE_MS } as unknown as Parameters<IdempotencyConfig['registerLambdaContext']>[0]);
          handle = makeIdempotent(
            async (key: DedupKey) => {
              executed++;
              return { ok: true, taskId: key.taskId };
            },
            { persistenceStore, config, keyPrefix: `${NS}:powertools` },
          );
        },
        prepare: (keys) => {
          const before = executed;
          return {
            op: async (i) => {
              if (!handle) throw new Error('powertools handler not set up');
              await handle(at(keys, i));
            },
            verify: () => (executed - before === keys.length ? undefined : `function ran ${executed - before}/${keys.length} times`),
          };
        },
      },
      {
        // Informational: the tier's whole per-key lifecycle, check then markDone after the commit:
        // the same two writes Powertools makes per call (in-progress record, then completed record).
        id: 'redis-tier-per-message-lifecycle',
        contender: 'Redis Lua tier, check([key]) + markDone([key])',
        unit: 'key',
        concurrency: C,
        roundTrips: '2 EVALSHA per key',
        redisCpu: true,
        informational: true,
        prepare: (keys) => ({
          op: async (i) => {
            const k = [redisKey(at(keys, i))];
            await tier.check(k);
            await tier.markDone(k);
          },
        }),
      },
      {
        id: 'redis-tier-batched-lifecycle',
        contender: `Redis Lua tier, check + markDone (${B} keys)`,
        unit: 'batch',
        concurrency: BC,
        roundTrips: '2 EVALSHA per batch',
        redisCpu: true,
        informational: true,
        prepare: (keys) => ({
          op: async (b) => {
            const k = batchOf(keys, b).map(redisKey);
            await tier.check(k);
            await tier.markDone(k);
          },
        }),
      },
      {
        // 3. PostgreSQL inbox, one transaction per key.
        id: 'pg-inbox-per-message',
        contender: 'PostgreSQL inbox, 1 tx per key (recordInInbox)',
        keysPerRound: PG_KEYS_PER_ROUND,
        unit: 'key',
        concurrency: C,
        roundTrips: '3 per key (BEGIN, INSERT, COMMIT) + 1 WAL flush',
        prepare: (keys) => {
          const f = fresh(keys.length);
          return {
            op: async (i) => {
              const client = await pool.connect();
              try {
                await client.query('BEGIN');
                if (await recordInInbox(client, entryOf(at(keys, i), i))) f.add();
                await client.query('COMMIT');
              } finally {
                client.release();
              }
            },
            verify: f.verify,
          };
        },
      },
      {
        // 4. PostgreSQL inbox, one multi-row insert per batch (recordManyInInbox, what the consumers use).
        id: 'pg-inbox-batched',
        contender: `PostgreSQL inbox, 1 tx per ${B} keys (recordManyInInbox)`,
        keysPerRound: PG_KEYS_PER_ROUND,
        unit: 'batch',
        concurrency: BC,
        roundTrips: '3 per batch (BEGIN, INSERT…SELECT unnest…RETURNING, COMMIT) + 1 WAL flush',
        prepare: (keys) => {
          const f = fresh(keys.length);
          return {
            op: async (b) => {
              const client = await pool.connect();
              try {
                await client.query('BEGIN');
                const inserted = await recordManyInInbox(
                  client,
                  batchOf(keys, b).map((k, j) => entryOf(k, b * B + j)),
                );
                await client.query('COMMIT');
                f.add(inserted.size);
              } finally {
                client.release();
              }
            },
            verify: f.verify,
          };
        },
      },
      {
        // 5. Bloom tier, in process: mightContain then add, per key, on the filter sized above.
        id: 'bloom-per-key',
        contender: 'Bloom tier (RecentKeys), mightContain + add',
        unit: 'key',
        concurrency: 1,
        roundTrips: 'none (in process, synchronous)',
        prepare: (keys) => {
          const ids = keys.map(formatKey);
          return {
            op: async (i) => {
              const id = at(ids, i);
              if (recent.mightContain(id)) falsePositives++;
              recent.add(id);
            },
          };
        },
      },
    ];

    const states: State[] = specs.map((spec) => ({ spec, rounds: [], latencies: [], notes: new Set<string>(), cpuUs: 0, redisCpuUs: 0, keysMeasured: 0 }));
    for (let round = 0; round < R; round++) {
      console.log(`round ${round + 1}/${R}`);
      for (const state of states) await runRound(state, round);
    }
    results.push(...states.map(summarize));
    batchedVsCeiling.push(...perRoundRatio(states, 'redis-tier-batched', 'raw-set-nx-pipeline'));
    batchedVsPeer.push(...perRoundRatio(states, 'redis-tier-batched', 'powertools-idempotency'));

    bloomMemory.falsePositivesOnFreshKeys = falsePositives;
    console.log(`bloom: ${falsePositives} false positives over ${(R * N + WARMUP).toLocaleString('en-US')} fresh keys checked`);
  } finally {
    await cleanup(redis, pool, admin, ptClient);
  }

  // ---------------------------------------------------------------- report
  const byId = (id: string) => results.find((r) => r.id === id);
  const ratio = (name: string, numId: string, denId: string, perRound: number[], target: number) => {
    const num = byId(numId);
    const den = byId(denId);
    if (!isResult(num) || !isResult(den) || perRound.length === 0) {
      const missing = [num, den].filter((r) => !isResult(r)).map((r) => r?.contender ?? '?');
      return { name, target, value: null, perRound, verdict: 'N/A', reason: `did not run: ${missing.join(', ')}` };
    }
    const value = median(perRound);
    return { name, target, value, perRound, verdict: value >= target ? 'PASS' : 'MISS' };
  };
  const ratios = [
    ratio('batched Redis tier ÷ raw pipelined SET NX ceiling', 'redis-tier-batched', 'raw-set-nx-pipeline', batchedVsCeiling, 0.5),
    ratio('batched Redis tier ÷ Powertools peer', 'redis-tier-batched', 'powertools-idempotency', batchedVsPeer, 3),
  ];

  const table = markdownTable(results);
  console.log('\n' + table + '\n');
  console.log(`Keys/s: median of ${R} interleaved rounds of ${N} fresh keys each (PostgreSQL rows: ${PG_KEYS_PER_ROUND} per round), range min–max; p50/p99: per unit (one key, or one batch of ${B} keys), over all rounds.`);
  for (const r of ratios) {
    const rounds = r.perRound.map((x) => x.toFixed(2)).join(', ');
    console.log(`RATIO ${r.name}: ${r.value === null ? 'n/a' : `${r.value.toFixed(2)}x`} (target ≥ ${r.target}x) → ${r.verdict}${rounds ? `  [per round: ${rounds}]` : ''}${'reason' in r ? `  (${r.reason})` : ''}`);
  }
  for (const r of results) if (!isResult(r)) console.log(`NOTE ${r.contender} did not run: ${r.skipped}`);
  console.log(
    `BLOOM MEMORY at configured capacity ${bloomCapacity.toLocaleString('en-US')} (error rate ${bloomErrorRate}, ${bloomMemory.bits.toLocaleString('en-US')} bits, ${bloomMemory.hashes} hashes per generation): ` +
      `two generations allocate +${mib(bloomMemory.twoGenerations.arrayBuffers)} off-heap (arrayBuffers), heapUsed +${mib(bloomMemory.twoGenerations.heapUsed)}; ` +
      `RSS +${mib(bloomMemory.twoGenerations.rss)} at allocation, +${mib(bloomMemory.pagesTouched.rss)} once bits are set (the bits' pages become resident; RSS is process-wide, so this is approximate)`,
  );

  const here = dirname(fileURLToPath(import.meta.url));
  const outDir = join(here, 'results');
  mkdirSync(outDir, { recursive: true });
  const file = join(outDir, `dedup-${startedAt.toISOString().replace(/[:.]/g, '-')}.json`);
  const report = {
    startedAt: startedAt.toISOString(),
    command: `npm run bench:dedup -- ${process.argv.slice(2).join(' ')}`.trim(),
    args: { keys: N, batch: B, concurrency: C, batchConcurrency: BC, rounds: R, pgKeysPerRound: PG_KEYS_PER_ROUND, warmupKeys: WARMUP },
    machine: { cpus: os.cpus().length, cpuModel: os.cpus()[0]?.model, totalMemBytes: os.totalmem(), platform: `${os.platform()} ${os.release()}`, node: process.version, loadavg: os.loadavg() },
    servers: { redis: redisVersion, postgres: pgVersion },
    notes: [
      'Every checked key is fresh (first delivery). keysPerSec is keys per second for every row (median round); p50Ms/p99Ms are per unit (one key, or one batch of `batch` keys) over all rounds.',
      'PostgreSQL contenders check `keys` in all, split over the rounds (pgKeysPerRound), to keep the run near a minute; the others check `keys` per round.',
      'Per-message contenders share `concurrency` in flight; batched contenders share `batchConcurrency`; Bloom is synchronous, in process.',
      'Ratios are the median of per-round ratios (the two contenders run back to back in each round).',
      'PostgreSQL batched uses recordManyInInbox, the consumers\' own batch insert.',
    ],
    bloomMemory,
    results,
    ratios,
    table,
  };
  writeFileSync(file, JSON.stringify(report, null, 2) + '\n');
  console.log(`\nresults: ${file}`);
  return 0;
}

function perRoundRatio(states: readonly State[], numId: string, denId: string): number[] {
  const num = states.find((s) => s.spec.id === numId);
  const den = states.find((s) => s.spec.id === denId);
  if (!num || !den || num.failed || den.failed) return [];
  return num.rounds.map((n, i) => n / (den.rounds[i] ?? NaN)).filter(Number.isFinite);
}

function markdownTable(results: readonly (Result | Skipped)[]): string {
  const lines = [
    `| Contender | Unit (latency per) | In flight | Keys/s (checks/s), median of ${R} | Range (min–max keys/s) | p50 | p99 | Node CPU µs/key | Redis CPU µs/key | Round trips |`,
    '|---|---|---:|---:|---:|---:|---:|---:|---:|---|',
  ];
  for (const r of results) {
    if (!isResult(r)) {
      lines.push(`| ${r.contender} | — | — | did not run | — | — | — | — | — | ${r.skipped.replace(/\|/g, '\\|')} |`);
      continue;
    }
    const name = r.informational ? `${r.contender} (info)` : r.contender;
    const unit = r.unit === 'batch' ? `batch of ${B}` : 'key';
    const range = `${fmtRate(Math.min(...r.keysPerSecRounds))}–${fmtRate(Math.max(...r.keysPerSecRounds))}`;
    const notes = r.notes ? `; ${r.notes.join('; ')}` : '';
    lines.push(`| ${name} | ${unit} | ${r.concurrency} | ${fmtRate(r.keysPerSec)} | ${range} | ${fmtMs(r.p50Ms)} | ${fmtMs(r.p99Ms)} | ${r.nodeCpuUsPerKey.toFixed(1)} | ${r.redisCpuUsPerKey === undefined ? '—' : r.redisCpuUsPerKey.toFixed(1)} | ${r.roundTrips}${notes} |`);
  }
  return lines.join('\n');
}

async function cleanup(redis: Redis, pool: pg.Pool, admin: pg.Client, ptClient: { quit(): Promise<unknown> } | undefined): Promise<void> {
  const step = async (what: string, work: () => Promise<unknown>) => {
    try {
      await work();
    } catch (error) {
      console.error(`cleanup: ${what} failed: ${(error as Error).message}`);
    }
  };
  let removed = 0;
  await step('redis keys', async () => {
    let cursor = '0';
    do {
      const [nextCursor, keys] = await redis.scan(cursor, 'MATCH', `${NS}:*`, 'COUNT', 1000);
      cursor = nextCursor;
      if (keys.length > 0) removed += await redis.unlink(...keys);
    } while (cursor !== '0');
  });
  console.log(`cleanup: unlinked ${removed} keys under ${NS}:*`);
  await step('powertools client', async () => ptClient?.quit());
  await step('redis', () => redis.quit());
  await step('pool', () => pool.end());
  await step('drop database', () => admin.query(`DROP DATABASE IF EXISTS ${DB_NAME} WITH (FORCE)`));
  await step('pg admin', () => admin.end());
}

runBench('dedup', main);
