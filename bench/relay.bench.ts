// Outbox relay benchmark: how many committed outbox rows per second the relay publishes to a real
// broker (read, send with acks=all, mark published), side by side in the same run with a raw
// ceiling (an @platformatic/kafka producer, the library createPublisher is built on, sending the
// same messages, no database) and, for
// information, the relay with a publisher that sends nothing (its database side alone).
//   npm run bench:relay -- --rows 50000 --rounds 3 --batch 500 --partitions 6
// Env: KAFKA_BROKERS (default 127.0.0.1:9092), PG_URL (default postgres://postgres@127.0.0.1:5432/postgres).
// Works in a fresh database (dropped at the end) and on fresh topics per round and contender
// (deleted at the end). Exit code is 0 whatever the target says (1 only if the bench could not run).
import { randomUUID } from 'node:crypto';
import { mkdirSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import pg from 'pg';
import { Producer, stringSerializers, type MessageToProduce } from '@platformatic/kafka';
import type { Admin } from 'kafkajs';
import { createKafka, createPublisher, createServedTopics, type KafkaPublisher } from '@labelflow/messaging';
import { countPendingSql, createOutboxRelay, outboxMigrationSql, type Publisher } from '@labelflow/outbox';
import { createLogger, createMetrics } from '@labelflow/telemetry';
import { fmtRate, median, positiveInt, redactUrl, runBench, sleep } from './common';

const { values: args } = parseArgs({
  options: {
    rows: { type: 'string', default: '50000' },
    rounds: { type: 'string', default: '3' },
    batch: { type: 'string', default: '500' },
    partitions: { type: 'string', default: '6' },
    'payload-bytes': { type: 'string', default: '600' },
    'consumer-rate': { type: 'string', default: '2000' },
    'send-latency-ms': { type: 'string', default: '0' },
    help: { type: 'boolean', default: false },
  },
});
if (args.help) {
  console.log('npm run bench:relay -- [--rows N=50000] [--rounds R=3] [--batch B=500] [--partitions P=6] [--payload-bytes 600] [--consumer-rate 2000] [--send-latency-ms 0]');
  process.exit(0);
}

const N = positiveInt('rows', args.rows);
/** Every contender runs R times, interleaved (round 1 of all, then round 2 of all…). */
const R = positiveInt('rounds', args.rounds);
/** The relay's batchSize and the ceiling's chunk per send, in messages. */
const B = positiveInt('batch', args.batch);
const P = positiveInt('partitions', args.partitions);
const PAYLOAD_BYTES = positiveInt('payload-bytes', args['payload-bytes']);
/** Events/s one consumer pipeline produces; the relay must keep 1.5× ahead of it. */
const CONSUMER_RATE = positiveInt('consumer-rate', args['consumer-rate']);
const TARGET = 1.5 * CONSUMER_RATE;
/** Added before every send of the relay and of the ceiling alike: a broker this far away (acks=all round trip). */
const SEND_LATENCY_MS = nonNegativeInt('send-latency-ms', args['send-latency-ms']);
const WARMUP = Math.min(5_000, Math.max(B * 2, Math.floor(N / 10)));
const BROKERS = (process.env.KAFKA_BROKERS ?? '127.0.0.1:9092').split(',');
const PG_URL = process.env.PG_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';
const RUN_ID = `${Date.now().toString(36)}${randomUUID().slice(0, 6)}`;
const DB_NAME = `lf_bench_relay_${RUN_ID}`.toLowerCase();
const TOPIC_PREFIX = `lf-bench-relay-${RUN_ID}`;
const CHANNEL = 'outbox_bench';

/** A task's saga, as the four services emit it: type and the topic it goes to. */
const SAGA = [
  ['TaskCreated', 'task-events', 'task-svc'],
  ['TaskAssigned', 'task-events', 'task-svc'],
  ['LabelSubmitted', 'label-events', 'label-svc'],
  ['QaStarted', 'qa-events', 'qa-svc'],
  ['QaPassed', 'qa-events', 'qa-svc'],
  ['BillingCompleted', 'billing-events', 'billing-svc'],
  ['TaskCompleted', 'task-events', 'task-svc'],
] as const;
const TOPICS = [...new Set(SAGA.map(([, topic]) => topic))];

function nonNegativeInt(name: string, raw: string | undefined): number {
  const n = Number(raw);
  if (!Number.isInteger(n) || n < 0) throw new Error(`--${name} must be a non-negative integer, got ${raw}`);
  return n;
}


// ---------------------------------------------------------------- workload

interface BenchMessage {
  readonly eventId: string;
  readonly eventType: string;
  /** Topic name without the round's prefix. */
  readonly topic: string;
  readonly key: string;
  readonly payload: unknown;
  readonly value: string;
  readonly headers: Record<string, string>;
}

/**
 * `n` events of about PAYLOAD_BYTES of JSON each: the envelope every labelflow event carries plus a
 * payload padded to size. Row i is step ⌊i / tasks⌋ of task i mod tasks, so many tasks are in
 * flight at once and each task's events are in saga order; keys are 19-digit task ids.
 */
function makeMessages(n: number): BenchMessage[] {
  const tasks = Math.max(1, Math.ceil(n / SAGA.length));
  const projectId = randomUUID();
  const base = 7_300_000_000_000_000_000n + BigInt(Math.floor(Math.random() * 1e9)) * 1_000_000n;
  return Array.from({ length: n }, (_, i) => {
    const [type, topic, producer] = SAGA[Math.floor(i / tasks) % SAGA.length] ?? SAGA[0];
    const taskId = (base + BigInt(i % tasks)).toString();
    const eventId = (base + 500_000n + BigInt(i)).toString();
    const event = {
      id: eventId,
      type,
      version: 1,
      taskId,
      projectId,
      attempt: 1,
      occurredAt: new Date(Date.UTC(2025, 0, 1) + i).toISOString(),
      producer,
      causationId: randomUUID(),
      payload: { annotatorId: `ann-${i % 97}`, annotations: [{ label: 'cat', confidence: 0.93 }, { label: 'dog', confidence: 0.04 }], note: '' },
    };
    event.payload.note = 'x'.repeat(Math.max(0, PAYLOAD_BYTES - JSON.stringify(event).length));
    const headers = {
      traceparent: `00-${randomUUID().replace(/-/g, '')}-${randomUUID().replace(/-/g, '').slice(0, 16)}-01`,
      'event-type': type,
      'event-version': '1',
    };
    return { eventId, eventType: type, topic, key: taskId, payload: event, value: JSON.stringify(event), headers };
  });
}

// ---------------------------------------------------------------- measurement

interface Result {
  readonly id: string;
  readonly contender: string;
  readonly what: string;
  readonly rowsPerRound: number;
  /** Rows published per second: the median round. */
  readonly rowsPerSec: number;
  readonly rowsPerSecRounds: number[];
  /** Node process CPU (user+system) per row, microseconds, over all rounds. */
  readonly nodeCpuUsPerRow: number;
  readonly informational?: boolean;
  readonly notes?: string[];
}

interface Skipped {
  readonly id: string;
  readonly contender: string;
  readonly skipped: string;
}

interface Spec {
  readonly id: string;
  readonly contender: string;
  readonly what: string;
  readonly informational?: boolean;
  /** Untimed preparation of a round over `messages` (fill the outbox, create topics). */
  readonly prepare: (messages: readonly BenchMessage[], tag: string) => Promise<Run>;
}

interface Run {
  /** The timed part: resolves once every row is published (and, for the relay, marked). */
  readonly go: () => Promise<void>;
  /** After the timed part: a note if something is off (e.g. not exactly N messages on the topics). */
  readonly verify?: () => Promise<string | undefined>;
}

interface State {
  readonly spec: Spec;
  failed?: string;
  readonly rounds: number[];
  readonly notes: Set<string>;
  cpuUs: number;
  rowsMeasured: number;
}

const isResult = (r: Result | Skipped | undefined): r is Result => r !== undefined && 'rowsPerSec' in r;


async function runRound(state: State, round: number, messages: readonly BenchMessage[], warmup: readonly BenchMessage[]): Promise<void> {
  const { spec } = state;
  if (state.failed) return;
  try {
    if (round === 0) {
      const warm = await spec.prepare(warmup, 'w');
      await warm.go();
    }
    const run = await spec.prepare(messages, `r${round + 1}`);
    const cpu0 = process.cpuUsage();
    const t0 = performance.now();
    await run.go();
    const elapsedMs = performance.now() - t0;
    const cpu = process.cpuUsage(cpu0);
    state.cpuUs += cpu.user + cpu.system;
    state.rowsMeasured += messages.length;
    const note = await run.verify?.();
    if (note) state.notes.add(note);
    const rate = (messages.length / elapsedMs) * 1000;
    state.rounds.push(rate);
    console.log(
      `  r${round + 1} ${spec.contender.padEnd(48)} ${fmtRate(rate).padStart(9)} rows/s  ${(elapsedMs / 1000).toFixed(2)} s` +
        `  node cpu ${((cpu.user + cpu.system) / messages.length).toFixed(1)} µs/row${note ? `  (${note})` : ''}`,
    );
  } catch (error) {
    state.failed = error instanceof Error ? `${error.name}: ${error.message}` : String(error);
    console.log(`  r${round + 1} ${spec.contender.padEnd(48)} FAILED: ${state.failed}`);
  }
}

function summarize(state: State): Result | Skipped {
  const { spec } = state;
  if (state.failed || state.rounds.length === 0) return { id: spec.id, contender: spec.contender, skipped: state.failed ?? 'no round completed' };
  return {
    id: spec.id,
    contender: spec.contender,
    what: spec.what,
    rowsPerRound: N,
    rowsPerSec: median(state.rounds),
    rowsPerSecRounds: state.rounds,
    nodeCpuUsPerRow: state.cpuUs / state.rowsMeasured,
    ...(spec.informational ? { informational: true } : {}),
    ...(state.notes.size > 0 ? { notes: [...state.notes] } : {}),
  };
}

// ---------------------------------------------------------------- main

async function main(): Promise<number> {
  const startedAt = new Date();
  console.log(
    `relay bench: rows=${N} per round, rounds=${R}, batch=${B}, ${TOPICS.length} topics × ${P} partitions, ~${PAYLOAD_BYTES} B payloads, warm-up=${WARMUP} rows per contender` +
      (SEND_LATENCY_MS > 0 ? `, +${SEND_LATENCY_MS} ms per send` : ''),
  );
  console.log(`kafka=${BROKERS.join(',')} pg=${redactUrl(PG_URL)} database=${DB_NAME} topics=${TOPIC_PREFIX}-*`);

  const logger = createLogger({ service: 'bench-relay', level: 'warn' });
  const kafka = createKafka({ brokers: BROKERS, clientId: `bench-relay-${RUN_ID}`, logger });
  const admin: Admin = kafka.admin();
  await admin.connect();
  const kafkaVersion = await brokerVersion(admin);
  const pgAdmin = new pg.Client({ connectionString: PG_URL });
  await pgAdmin.connect();
  const pgVersion = (await pgAdmin.query<{ v: string }>("SELECT current_setting('server_version') AS v")).rows[0]?.v ?? 'unknown';
  await pgAdmin.query(`CREATE DATABASE ${DB_NAME}`);
  const dbUrl = new URL(PG_URL);
  dbUrl.pathname = `/${DB_NAME}`;
  const pool = new pg.Pool({ connectionString: dbUrl.toString(), max: 4 });
  // DROP DATABASE … WITH (FORCE) at the end terminates idle pooled connections: not an error here.
  pool.on('error', () => undefined);
  const created: string[] = [];
  let publisher: KafkaPublisher | undefined;
  let producer: Producer<string, string, string, string> | undefined;
  const results: (Result | Skipped)[] = [];
  const ratios: number[] = [];

  try {
    await pool.query(outboxMigrationSql);
    publisher = createPublisher({ brokers: BROKERS, clientId: `bench-relay-${RUN_ID}` });
    await publisher.connect();
    // The ceiling: the library createPublisher is built on, with its settings (idempotent, acks=all,
    // one request in flight, default partitioner), B messages per send, messages prepared up front.
    producer = new Producer<string, string, string, string>({ clientId: `bench-relay-raw-${RUN_ID}`, bootstrapBrokers: BROKERS, serializers: stringSerializers, idempotent: true, autocreateTopics: false });
    await producer.metadata({ topics: [] });
    const raw = producer;
    const kafkaPublisher = publisher;
    const relayPublisher: Publisher = {
      send: async (messages) => {
        if (SEND_LATENCY_MS > 0) await sleep(SEND_LATENCY_MS);
        await kafkaPublisher.send(messages);
      },
    };

    const topicsFor = async (tag: string, contender: string) => {
      const names = Object.fromEntries(TOPICS.map((t) => [t, `${TOPIC_PREFIX}-${tag}-${contender}-${t}`]));
      await createServedTopics(admin, Object.values(names).map((topic) => ({ topic, numPartitions: P, replicationFactor: 1 })));
      created.push(...Object.values(names));
      return names;
    };
    const messagesOnTopics = async (names: Record<string, string>) => {
      let total = 0;
      for (const topic of Object.values(names)) for (const p of await admin.fetchTopicOffsets(topic)) total += Number(p.high) - Number(p.low);
      return total;
    };
    const fill = async (messages: readonly BenchMessage[], names: Record<string, string> | undefined) => {
      await pool.query('TRUNCATE outbox');
      for (let at = 0; at < messages.length; at += 5_000) {
        const chunk = messages.slice(at, at + 5_000);
        await pool.query(
          `INSERT INTO outbox (event_id, topic, message_key, event_type, payload, headers)
           SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::json[], $6::json[])`,
          [
            chunk.map((m) => m.eventId),
            chunk.map((m) => names?.[m.topic] ?? m.topic),
            chunk.map((m) => m.key),
            chunk.map((m) => m.eventType),
            chunk.map((m) => m.value),
            chunk.map((m) => JSON.stringify(m.headers)),
          ],
        );
      }
      // Planner statistics as autovacuum would have them; no VACUUM (a live outbox is never all-visible).
      await pool.query('ANALYZE outbox');
    };
    /** Starts a relay and resolves once its outbox_published_total reaches `n` (polled in process, every 2 ms). */
    const relayUntilPublished = async (n: number, relayPub: Publisher) => {
      const metrics = createMetrics({ service: 'bench-relay', defaults: false });
      const relay = createOutboxRelay({ pool, publisher: relayPub, channel: CHANNEL, logger, metrics, batchSize: B });
      const published = metrics.counter('outbox_published_total', 'Outbox rows published to Kafka');
      relay.start();
      try {
        for (;;) {
          const value = (await published.get()).values[0]?.value ?? 0;
          if (value >= n) return;
          await new Promise((resolve) => setTimeout(resolve, 2));
        }
      } finally {
        await relay.close();
      }
    };
    const pendingRows = async () => (await pool.query<{ n: number }>(countPendingSql)).rows[0]?.n ?? -1;

    const specs: Spec[] = [
      {
        id: 'relay',
        contender: 'Outbox relay (createOutboxRelay)',
        what: `SELECT from the outbox, createPublisher().send (@platformatic/kafka, acks=all, idempotent), DELETE FROM outbox_pending; batchSize ${B}, other options default`,
        prepare: async (messages, tag) => {
          const names = await topicsFor(tag, 'relay');
          await fill(messages, names);
          return {
            go: () => relayUntilPublished(messages.length, relayPublisher),
            verify: async () => {
              const [onTopics, pending] = [await messagesOnTopics(names), await pendingRows()];
              const notes = [onTopics !== messages.length ? `${onTopics} messages on the topics for ${messages.length} rows` : '', pending !== 0 ? `${pending} rows left unpublished` : ''].filter(Boolean);
              return notes.length > 0 ? notes.join('; ') : undefined;
            },
          };
        },
      },
      {
        id: 'raw-send-batch',
        contender: `Ceiling: @platformatic/kafka producer.send (${B} per call)`,
        what: `producer.send of ${B} prepared messages at a time, acks=all, idempotent, one request in flight; no database`,
        prepare: async (messages, tag) => {
          const names = await topicsFor(tag, 'raw');
          const chunks: MessageToProduce<string, string, string, string>[][] = [];
          for (let at = 0; at < messages.length; at += B) chunks.push(messages.slice(at, at + B).map((m) => ({ topic: names[m.topic] ?? m.topic, key: m.key, value: m.value, headers: m.headers })));
          return {
            go: async () => {
              for (const batch of chunks) {
                if (SEND_LATENCY_MS > 0) await sleep(SEND_LATENCY_MS);
                await raw.send({ messages: batch });
              }
            },
            verify: async () => {
              const onTopics = await messagesOnTopics(names);
              return onTopics !== messages.length ? `${onTopics} messages on the topics for ${messages.length} sent` : undefined;
            },
          };
        },
      },
      {
        id: 'relay-db-only',
        contender: 'Relay, publisher that sends nothing (DB side)',
        what: 'the same relay with send() resolving at once: SELECT + DELETE of the pending ids alone',
        informational: true,
        prepare: async (messages) => {
          await fill(messages, undefined);
          return {
            go: () => relayUntilPublished(messages.length, { send: async () => undefined }),
            verify: async () => {
              const pending = await pendingRows();
              return pending !== 0 ? `${pending} rows left unpublished` : undefined;
            },
          };
        },
      },
    ];

    const warmup = makeMessages(WARMUP);
    const states: State[] = specs.map((spec) => ({ spec, rounds: [], notes: new Set<string>(), cpuUs: 0, rowsMeasured: 0 }));
    for (let round = 0; round < R; round++) {
      console.log(`round ${round + 1}/${R}`);
      const messages = makeMessages(N);
      for (const state of states) await runRound(state, round, messages, warmup);
    }
    results.push(...states.map(summarize));
    const relay = states.find((s) => s.spec.id === 'relay');
    const ceiling = states.find((s) => s.spec.id === 'raw-send-batch');
    if (relay && ceiling && !relay.failed && !ceiling.failed) ratios.push(...relay.rounds.map((r, i) => r / (ceiling.rounds[i] ?? NaN)).filter(Number.isFinite));
  } finally {
    await cleanup({ admin, created, pool, pgAdmin, publisher, producer });
  }

  // ---------------------------------------------------------------- report
  const relayResult = results.find((r) => r.id === 'relay');
  const ratio = ratios.length > 0 ? median(ratios) : null;
  const target = isResult(relayResult)
    ? { value: relayResult.rowsPerSec, target: TARGET, verdict: relayResult.rowsPerSec >= TARGET ? 'PASS' : 'MISS' }
    : { value: null, target: TARGET, verdict: 'N/A' };
  const table = markdownTable(results);
  console.log('\n' + table + '\n');
  console.log(
    `Rows/s: median of ${R} interleaved rounds of ${N} rows each, range min–max; CPU: this Node process (relay, pg client and kafkajs), per row.` +
      (SEND_LATENCY_MS > 0 ? ` Every send (relay and ceiling) waited ${SEND_LATENCY_MS} ms first.` : ''),
  );
  console.log(`RATIO relay ÷ raw producer ceiling: ${ratio === null ? 'n/a' : `${ratio.toFixed(2)}x`}${ratios.length > 0 ? `  [per round: ${ratios.map((x) => x.toFixed(2)).join(', ')}]` : ''}`);
  console.log(`TARGET relay ≥ 1.5 × ${CONSUMER_RATE} events/s = ${TARGET} rows/s: ${target.value === null ? 'n/a' : fmtRate(target.value)} → ${target.verdict}`);
  for (const r of results) if (!isResult(r)) console.log(`NOTE ${r.contender} did not run: ${r.skipped}`);

  const outDir = join(dirname(fileURLToPath(import.meta.url)), 'results');
  mkdirSync(outDir, { recursive: true });
  const file = join(outDir, `relay-${startedAt.toISOString().replace(/[:.]/g, '-')}.json`);
  const report = {
    startedAt: startedAt.toISOString(),
    command: `npm run bench:relay -- ${process.argv.slice(2).join(' ')}`.trim(),
    args: { rows: N, rounds: R, batch: B, partitions: P, topics: TOPICS.length, payloadBytes: PAYLOAD_BYTES, consumerRate: CONSUMER_RATE, sendLatencyMs: SEND_LATENCY_MS, warmupRows: WARMUP },
    machine: { cpus: os.cpus().length, cpuModel: os.cpus()[0]?.model, totalMemBytes: os.totalmem(), platform: `${os.platform()} ${os.release()}`, node: process.version, loadavg: os.loadavg() },
    servers: { kafka: kafkaVersion, postgres: pgVersion },
    notes: [
      'rowsPerSec is the median round; every round publishes `rows` fresh rows to fresh topics (one set per contender and round).',
      'The relay is timed from start() until its outbox_published_total reaches `rows` (rows sent and marked), polled in process every 2 ms.',
      'The ceiling sends the same messages (prepared up front) with an @platformatic/kafka producer.send, `batch` at a time, one call after the other.',
      'Kafka, PostgreSQL and the bench share one machine: the numbers include their contention for CPU.',
      'sendLatencyMs is slept before every relay send and every ceiling send alike (a broker that far away); the DB-side contender sends nothing and so waits nothing.',
    ],
    results,
    ratio: { name: 'relay ÷ raw producer ceiling', value: ratio, perRound: ratios },
    target: { name: `relay rows/s ≥ 1.5 × ${CONSUMER_RATE} events/s (one consumer pipeline)`, ...target },
    table,
  };
  writeFileSync(file, JSON.stringify(report, null, 2) + '\n');
  console.log(`\nresults: ${file}`);
  return 0;
}

function markdownTable(results: readonly (Result | Skipped)[]): string {
  const lines = [`| Contender | Rows/s, median of ${R} | Range (min–max rows/s) | Node CPU µs/row | What one row costs |`, '|---|---:|---:|---:|---|'];
  for (const r of results) {
    if (!isResult(r)) {
      lines.push(`| ${r.contender} | did not run | — | — | ${r.skipped.replace(/\|/g, '\\|')} |`);
      continue;
    }
    const name = r.informational ? `${r.contender} (info)` : r.contender;
    const range = `${fmtRate(Math.min(...r.rowsPerSecRounds))}–${fmtRate(Math.max(...r.rowsPerSecRounds))}`;
    const notes = r.notes ? `; ${r.notes.join('; ')}` : '';
    lines.push(`| ${name} | ${fmtRate(r.rowsPerSec)} | ${range} | ${r.nodeCpuUsPerRow.toFixed(1)} | ${r.what}${notes} |`);
  }
  return lines.join('\n');
}

async function brokerVersion(admin: Admin): Promise<string> {
  try {
    const cluster = await admin.describeCluster();
    return `${cluster.brokers.length} broker(s), controller ${cluster.controller}`;
  } catch {
    return 'unknown';
  }
}

async function cleanup(c: { admin: Admin; created: string[]; pool: pg.Pool; pgAdmin: pg.Client; publisher?: KafkaPublisher; producer?: Producer<string, string, string, string> }): Promise<void> {
  const step = async (what: string, work: () => Promise<unknown>) => {
    try {
      await work();
    } catch (error) {
      console.error(`cleanup: ${what} failed: ${(error as Error).message}`);
    }
  };
  await step('publisher', async () => c.publisher?.disconnect());
  await step('producer', async () => c.producer?.close());
  await step('topics', async () => (c.created.length > 0 ? c.admin.deleteTopics({ topics: c.created }) : undefined));
  console.log(`cleanup: deleted ${c.created.length} topics ${TOPIC_PREFIX}-*`);
  await step('kafka admin', () => c.admin.disconnect());
  await step('pool', () => c.pool.end());
  await step('drop database', () => c.pgAdmin.query(`DROP DATABASE IF EXISTS ${DB_NAME} WITH (FORCE)`));
  await step('pg admin', () => c.pgAdmin.end());
}

runBench('relay', main);
