// Saga throughput benchmark against the RUNNING stack (npm start): open-loop arrivals of happy-path
// sagas at a fixed rate R for a step of D seconds, R stepped up (10, 20, 30, 45, 60, 80, 100, 130,
// 160, …) until a step is not sustained, with the producer's duplicator re-delivering 30 % of the
// Kafka messages on the four event topics. Then a separate run at half the highest sustained rate
// for the saga latency (create → completed). Per step: CPU ms per saga of each service process, of
// PostgreSQL (every backend, also those that come and go), of the Kafka broker and of this driver,
// HTTP requests per saga step (the producer's accounting) and the duplicates delivered.
//   npm run bench:saga -- --step-s 15 --max-rate 160 --duplicates 0.3
// Env: TASK_SVC_URL, LABEL_SVC_URL, QA_SVC_URL, BILLING_SVC_URL (default http://127.0.0.1:3001 … :3004),
// KAFKA_BROKERS (default 127.0.0.1:9092), KAFKA_TOPIC_PREFIX (default labelflow), PG_URL (default
// postgres://postgres@127.0.0.1:5432: to find the PostgreSQL process, and to read, read-only, the
// state of the services' databases, <svc>_svc plus LABELFLOW_DB_SUFFIX if set) and REDIS_URL
// (default redis://127.0.0.1:6379: only to find the Redis process).
// Creates one funded project in billing-svc (it stays: the services' data is theirs) and a duplicator
// consumer group (deleted at the end). Every request carries a bearer token signed with the local
// development key (LABELFLOW_SIGNING_KEY_FILE, default .local/auth/dev-signing-key.json: the one
// `npm start` configures the services with; AUTH_ISSUER/AUTH_AUDIENCE if set, else the dev ones):
// a platform admin creates the project and reads /metrics, managers create the tasks and wait for
// them, annotators claim and label, reviewers review. Rate limits are per subject and service
// (default 100 req/s): --managers and --reviewers default to enough of them for --max-rate, and a
// 429 is waited out (Retry-After) and counted per step.
// Progress goes to stderr, the table to stdout, the results to bench/results/saga-<timestamp>.json.
// Exit code 0 whatever the targets say; 1 if the bench could not run (the stack is not up, the
// project could not be created, no step ran).
import { execFileSync } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { Kafka, logLevel, type Admin } from 'kafkajs';
import pg from 'pg';
import { DEV_AUDIENCE, DEV_ISSUER } from '@labelflow/auth';
import { adminOf, castFor, client, devSigner, runScenario, Scenario, type Actor, type ScenarioContext, type Services, type Step, type StepTally, type TaskRun } from '@labelflow/producer';
// Not exported by the producer's index: imported from its module file.
import { startDuplicator, type Duplicator } from '../tools/producer/src/duplicator';
import { machineCpu, percentile, runBench, sleep } from './common';
import { allStats, CLK_TCK, cmdline, findInfra, listenerPid, localPort, pgrep, target, targetTicks, ticksToMs, treeDelta, type Target } from './proc';

const { values: args } = parseArgs({
  options: {
    rates: { type: 'string', default: '10,20,30,45,60,80,100,130,160' },
    'max-rate': { type: 'string', default: '160' },
    'step-s': { type: 'string', default: '15' },
    'drain-s': { type: 'string', default: '5' },
    'half-s': { type: 'string' },
    'warmup-s': { type: 'string', default: '4' },
    duplicates: { type: 'string', default: '0.3' },
    'timeout-s': { type: 'string', default: '20' },
    'wait-s': { type: 'string', default: '10' },
    'min-achieved': { type: 'string', default: '0.95' },
    'inflight-s': { type: 'string', default: '2' },
    'max-inflight': { type: 'string', default: '3000' },
    retries: { type: 'string', default: '1' },
    refine: { type: 'string', default: '2' },
    'quiesce-s': { type: 'string', default: '15' },
    'max-run-s': { type: 'string', default: '240' },
    annotators: { type: 'string', default: '8' },
    reviewers: { type: 'string' },
    managers: { type: 'string' },
    price: { type: 'string', default: '150' },
    seed: { type: 'string', default: '42' },
    'task-url': { type: 'string', default: process.env.TASK_SVC_URL ?? 'http://127.0.0.1:3001' },
    'label-url': { type: 'string', default: process.env.LABEL_SVC_URL ?? 'http://127.0.0.1:3002' },
    'qa-url': { type: 'string', default: process.env.QA_SVC_URL ?? 'http://127.0.0.1:3003' },
    'billing-url': { type: 'string', default: process.env.BILLING_SVC_URL ?? 'http://127.0.0.1:3004' },
    'kafka-brokers': { type: 'string', default: process.env.KAFKA_BROKERS ?? '127.0.0.1:9092' },
    prefix: { type: 'string', default: process.env.KAFKA_TOPIC_PREFIX ?? 'labelflow' },
    'pg-url': { type: 'string', default: process.env.PG_URL ?? 'postgres://postgres@127.0.0.1:5432' },
    'redis-url': { type: 'string', default: process.env.REDIS_URL ?? 'redis://127.0.0.1:6379' },
    help: { type: 'boolean', default: false },
  },
});
if (args.help) {
  console.log(
    'npm run bench:saga -- [--rates 10,20,30,45,60,80,100,130,160] [--max-rate 160] [--step-s 15] [--drain-s 5] [--half-s =step-s] [--warmup-s 4]\n' +
      '                      [--duplicates 0.3] [--timeout-s 20] [--wait-s 10] [--min-achieved 0.95] [--inflight-s 2] [--max-inflight 3000] [--retries 1] [--refine 2]\n' +
      '                      [--quiesce-s 15] [--max-run-s 240] [--annotators 8] [--reviewers max(3,⌈max-rate/40⌉)] [--managers max(4,⌈max-rate/30⌉)] [--price 150] [--seed 42]\n' +
      '                      [--task-url U] [--label-url U] [--qa-url U] [--billing-url U] [--kafka-brokers B] [--prefix labelflow] [--pg-url U] [--redis-url U]',
  );
  process.exit(0);
}

function num(name: string, raw: string | undefined, { min = 0, integer = false, max = Number.MAX_SAFE_INTEGER } = {}): number {
  const n = Number(raw);
  if (!Number.isFinite(n) || n < min || n > max || (integer && !Number.isInteger(n))) {
    console.error(`saga bench could not run: --${name} must be ${integer ? 'an integer' : 'a number'} from ${min}${max === Number.MAX_SAFE_INTEGER ? '' : ` to ${max}`}, got ${raw}`);
    process.exit(1);
  }
  return n;
}

const STEP_S = num('step-s', args['step-s'], { min: 1 });
const DRAIN_S = num('drain-s', args['drain-s'], { min: 0 });
const HALF_S = num('half-s', args['half-s'] ?? args['step-s'], { min: 1 });
const WARMUP_S = num('warmup-s', args['warmup-s'], { min: 0 });
const DUP_RATE = num('duplicates', args.duplicates, { max: 1 });
const TIMEOUT_MS = num('timeout-s', args['timeout-s'], { min: 1 }) * 1000;
const WAIT_S = num('wait-s', args['wait-s'], { integer: true, max: 30 });
/** A step is sustained only if at least this share of its R·D sagas completed by D + drain. */
const MIN_ACHIEVED = num('min-achieved', args['min-achieved'], { min: 0, max: 1 });
/** In flight at the end of a step may be at most R × this (Little's law: mean time in the system), and at least 10. */
const INFLIGHT_S = num('inflight-s', args['inflight-s'], { min: 0 });
const INFLIGHT_FLOOR = 10;
const MAX_INFLIGHT = num('max-inflight', args['max-inflight'], { min: 1, integer: true });
const RETRIES = num('retries', args.retries, { integer: true, max: 5 });
/** Bisection steps between the highest sustained rate of the ladder and the first that was not. */
const REFINE = num('refine', args.refine, { integer: true, max: 5 });
const QUIESCE_MS = num('quiesce-s', args['quiesce-s'], { min: 0 }) * 1000;
const MAX_RUN_MS = num('max-run-s', args['max-run-s'], { min: 10 }) * 1000;
const ANNOTATORS = num('annotators', args.annotators, { min: 1, integer: true });
const PRICE = num('price', args.price, { min: 1, integer: true });
const SEED = num('seed', args.seed, { integer: true });
const MAX_RATE = num('max-rate', args['max-rate'], { min: 0.1 });
// Rate limits are per subject and service (default 100 req/s): a reviewer sends about one request
// per saga to qa-svc, a manager two or three to task-svc (create, the wait for the outcome).
const REVIEWERS = num('reviewers', args.reviewers ?? String(Math.max(3, Math.ceil(MAX_RATE / 40))), { min: 1, integer: true });
const MANAGERS = num('managers', args.managers ?? String(Math.max(4, Math.ceil(MAX_RATE / 30))), { min: 1, integer: true });
const URLS = { task: String(args['task-url']), label: String(args['label-url']), qa: String(args['qa-url']), billing: String(args['billing-url']) };
const SERVICES = [
  ['task-svc', URLS.task],
  ['label-svc', URLS.label],
  ['qa-svc', URLS.qa],
  ['billing-svc', URLS.billing],
] as const;
const BROKERS = String(args['kafka-brokers']).split(',').map((b) => b.trim()).filter(Boolean);
const PREFIX = String(args.prefix);
const TOPICS = ['task', 'label', 'qa', 'billing'].map((t) => `${PREFIX}.${t}-events`);
/** Only to find the PostgreSQL process and, read-only, the state of the services' databases (`<pg-url>/<svc>_svc`). */
const PG_URL = String(args['pg-url']);
/** Only to find the Redis process. */
const REDIS_URL = String(args['redis-url']);
const SUSTAIN_TARGET = 150; // sagas/s
const P99_TARGET_MS = 1000; // at half the highest sustained rate

/** The rate ladder: --rates up to --max-rate, then ×1.25 (rounded to tens) up to --max-rate. */
function ladder(): number[] {
  const listed = String(args.rates)
    .split(',')
    .map((r) => num('rates', r.trim(), { min: 0.1 }))
    .sort((a, b) => a - b);
  const rates = listed.filter((r) => r <= MAX_RATE);
  let last = rates.at(-1) ?? listed[0] ?? 10;
  if (rates.length === 0) rates.push(Math.min(last, MAX_RATE));
  while (last < MAX_RATE && rates.length < 40) {
    last = Math.min(MAX_RATE, Math.ceil((last * 1.25) / 10) * 10);
    if (last > (rates.at(-1) ?? 0)) rates.push(last);
  }
  return rates;
}
const RATES = ladder();

const progress = (line: string) => process.stderr.write(`${line}\n`);
const fmtMs = (ms: number) => (!Number.isFinite(ms) ? 'n/a' : ms >= 10_000 ? `${(ms / 1000).toFixed(1)} s` : `${Math.round(ms)} ms`);
const fmt1 = (n: number | undefined) => (n === undefined || !Number.isFinite(n) ? 'n/a' : n >= 100 ? n.toFixed(0) : n.toFixed(1));
const fmtRate = (n: number) => (Number.isInteger(n) ? String(n) : n.toFixed(1));

// ---------------------------------------------------------------- processes and CPU (/proc)

const COLUMNS = ['task-svc', 'label-svc', 'qa-svc', 'billing-svc', 'postgres', 'kafka', 'redis'] as const;
type Column = (typeof COLUMNS)[number];

function findTargets(): { targets: Partial<Record<Column, Target>>; notes: string[] } {
  const targets: Partial<Record<Column, Target>> = {};
  const notes: string[] = [];
  for (const [svc, url] of SERVICES) {
    const found = pgrep(`dist/apps/${svc}/main.js`);
    const port = localPort(url, 80);
    if (found.length === 1) {
      targets[svc] = target(svc, `pgrep -f dist/apps/${svc}/main.js`, found);
    } else {
      const pid = port === undefined ? undefined : listenerPid(port);
      if (pid !== undefined) targets[svc] = target(svc, `listening on :${port}${found.length > 1 ? ` (pgrep matched ${found.length})` : ''}`, [pid]);
    }
    if (!targets[svc]) notes.push(`${svc}: no local process found (pgrep -f dist/apps/${svc}/main.js, or a listener on ${url}); its CPU column is n/a`);
  }
  const infra = findInfra({ pgUrl: PG_URL, brokers: BROKERS, redisUrl: REDIS_URL });
  Object.assign(targets, infra.targets);
  notes.push(...infra.notes);
  return { targets, notes };
}

/** The databases `npm start` gives the services (with its LABELFLOW_DB_SUFFIX, for a second stack): PostgreSQL backends on them are the stack's own. */
const SERVICE_DBS = new Set(['task_svc', 'label_svc', 'qa_svc', 'billing_svc'].map((db) => `${db}${process.env.LABELFLOW_DB_SUFFIX ?? ''}`));
type PgClass = 'service-db backends' | 'other backends' | 'background' | 'exited children';
/** A PostgreSQL child by its title, `postgres: 15/main: <user> <db> <host>(<port>) <state>`: a backend of which database, or background. */
function pgClass(pid: number): PgClass {
  const m = /^postgres: (?:[^:]*: )?\S+ (\S+) (?:\S+\(\d+\)|\[local\])/.exec(cmdline(pid));
  return !m ? 'background' : SERVICE_DBS.has(m[1] ?? '') ? 'service-db backends' : 'other backends';
}

interface Snapshot {
  /** Clock ticks per column; undefined when a process of that column is gone or was replaced. */
  readonly ticks: Partial<Record<Column, number>>;
  /** PostgreSQL per process (pid → start, ticks, class), to split its CPU by who the backend serves. */
  readonly pg: ReadonlyMap<number, { start: number; ticks: number; cls: PgClass }>;
  readonly pgExited: number;
  /** Every process's ticks, and those of the measured ones: the rest is other load on the machine. */
  readonly measuredTicks: number;
  readonly driverUs: number;
  readonly machine: { readonly busy: number; readonly total: number };
  readonly at: number;
}

function snapshot(targets: Partial<Record<Column, Target>>): Snapshot {
  const stats = allStats();
  const ticks: Partial<Record<Column, number>> = {};
  const pg = new Map<number, { start: number; ticks: number; cls: PgClass }>();
  let pgExited = 0;
  const pgRoots = targets.postgres?.pids ?? [];
  for (const s of stats.values()) {
    if (pgRoots.includes(s.ppid)) pg.set(s.pid, { start: s.start, ticks: s.own, cls: pgClass(s.pid) });
    if (pgRoots.includes(s.pid)) {
      pg.set(s.pid, { start: s.start, ticks: s.own, cls: 'background' });
      pgExited += s.children;
    }
  }
  for (const col of COLUMNS) {
    const t = targets[col];
    const sum = t === undefined ? undefined : targetTicks(t, stats);
    if (sum !== undefined) ticks[col] = sum;
  }
  const cpu = process.cpuUsage();
  const measuredTicks = Object.values(ticks).reduce((a, b) => a + b, 0) + ((cpu.user + cpu.system) / 1e6) * CLK_TCK;
  return { ticks, pg, pgExited, measuredTicks, driverUs: cpu.user + cpu.system, machine: machineCpu(), at: performance.now() };
}

interface CpuDelta {
  /** CPU ms over the window per column (undefined: not measured), and this driver's. */
  readonly ms: Partial<Record<Column | 'driver', number>>;
  /** PostgreSQL's ms split by what the process serves (the services' four databases, others, background, exited). */
  readonly pgMs: Record<PgClass, number>;
  /** Machine busy ms not in any measured column: other load sharing the cores. */
  readonly otherMs: number;
  readonly machineBusy: number;
  readonly machineMs: number;
  readonly wallMs: number;
}
function cpuDelta(a: Snapshot, b: Snapshot): CpuDelta {
  const ms: Partial<Record<Column | 'driver', number>> = {};
  for (const col of COLUMNS) {
    const x = a.ticks[col];
    const y = b.ticks[col];
    if (x !== undefined && y !== undefined) ms[col] = ticksToMs(y - x);
  }
  ms.driver = (b.driverUs - a.driverUs) / 1000;
  const pgMs: Record<PgClass, number> = { 'service-db backends': 0, 'other backends': 0, background: 0, 'exited children': ticksToMs(b.pgExited - a.pgExited) };
  const { live, endedBefore } = treeDelta(a.pg, b.pg);
  for (const [pid, ticks] of live) pgMs[b.pg.get(pid)?.cls ?? 'background'] += ticksToMs(ticks);
  pgMs['exited children'] -= ticksToMs(endedBefore);
  return {
    ms,
    pgMs,
    otherMs: ticksToMs(b.machine.busy - a.machine.busy - (b.measuredTicks - a.measuredTicks)),
    machineBusy: (b.machine.busy - a.machine.busy) / Math.max(1, b.machine.total - a.machine.total),
    machineMs: ticksToMs(b.machine.busy - a.machine.busy),
    wallMs: b.at - a.at,
  };
}

// ---------------------------------------------------------------- the services' own counters and the consumer lag

/** consumer_messages_total summed by outcome, and dedup_duplicates_total by tier, over the four services (as the platform admin: /metrics is theirs). */
async function scrapeMetrics(admin: Actor): Promise<{ outcomes: Record<string, number>; dedupTiers: Record<string, number>; failed: string[] }> {
  const outcomes: Record<string, number> = {};
  const dedupTiers: Record<string, number> = {};
  const failed: string[] = [];
  await Promise.all(
    SERVICES.map(async ([svc, url]) => {
      try {
        const res = await fetch(`${url}/metrics`, { headers: { authorization: await admin.authorization() }, signal: AbortSignal.timeout(3_000) });
        const text = await res.text();
        if (res.status !== 200) throw new Error(`/metrics answered ${res.status} ${text.slice(0, 200)}`);
        for (const line of text.split('\n')) {
          const m = /^(consumer_messages_total|dedup_duplicates_total)\{([^}]*)\}\s+(\S+)/.exec(line);
          if (!m) continue;
          const labels = m[2] ?? '';
          const value = Number(m[3]);
          if (m[1] === 'consumer_messages_total') {
            const outcome = /outcome="([^"]*)"/.exec(labels)?.[1] ?? '?';
            outcomes[outcome] = (outcomes[outcome] ?? 0) + value;
          } else {
            const tier = /tier="([^"]*)"/.exec(labels)?.[1] ?? '?';
            dedupTiers[tier] = (dedupTiers[tier] ?? 0) + value;
          }
        }
      } catch (error) {
        failed.push(`${svc}: ${(error as Error).message}`);
      }
    }),
  );
  return { outcomes, dedupTiers, failed };
}
const diffCounts = (a: Record<string, number>, b: Record<string, number>) =>
  Object.fromEntries(Object.keys({ ...a, ...b }).map((k) => [k, (b[k] ?? 0) - (a[k] ?? 0)]).filter(([, v]) => v !== 0));

/** Messages not yet consumed (committed) by the services' consumer groups and the duplicator's. */
async function consumerLag(admin: Admin, groups: readonly string[]): Promise<number> {
  const high = new Map<string, Map<number, number>>();
  for (const topic of TOPICS) {
    high.set(topic, new Map((await admin.fetchTopicOffsets(topic)).map((p) => [p.partition, Number(p.high)])));
  }
  let lag = 0;
  for (const groupId of groups) {
    for (const t of await admin.fetchOffsets({ groupId, topics: TOPICS })) {
      for (const p of t.partitions) {
        const committed = Number(p.offset);
        const h = high.get(t.topic)?.get(p.partition) ?? 0;
        // No committed offset yet (-1): the group starts from the end it found; nothing to wait for.
        if (committed >= 0) lag += Math.max(0, h - committed);
      }
    }
  }
  return lag;
}

/** Waits (at most QUIESCE_MS) until every consumer group has consumed and committed everything. */
async function quiesce(admin: Admin, groups: readonly string[]): Promise<{ ms: number; lag: number }> {
  const t = performance.now();
  let lag = NaN;
  for (;;) {
    try {
      lag = await consumerLag(admin, groups);
    } catch {
      lag = NaN;
    }
    if (lag === 0 || performance.now() - t >= QUIESCE_MS) return { ms: performance.now() - t, lag };
    await sleep(250);
  }
}

// ---------------------------------------------------------------- the services' databases (read-only, diagnostic)

interface DbState {
  readonly autovacuum?: string;
  /** Per database: rows, dead rows (never vacuumed when autovacuum is off), size. */
  readonly dbs: Record<string, { liveRows: number; deadRows: number; bytes: number; analyzedTables: number; tables: number }>;
  readonly error?: string;
}

/** The state of the four services' databases, which their per-saga cost depends on (dead rows, planner statistics). */
async function dbState(): Promise<DbState> {
  const dbs: DbState['dbs'] = {};
  let autovacuum: string | undefined;
  for (const db of SERVICE_DBS) {
    const url = new URL(PG_URL);
    url.pathname = `/${db}`;
    const c = new pg.Client({ connectionString: url.toString(), connectionTimeoutMillis: 3_000, statement_timeout: 5_000 });
    try {
      await c.connect();
      autovacuum ??= (await c.query<{ autovacuum: string }>('SHOW autovacuum')).rows[0]?.autovacuum;
      const r = await c.query<{ live: string; dead: string; analyzed: string; tables: string; bytes: string }>(
        `SELECT coalesce(sum(n_live_tup), 0) AS live, coalesce(sum(n_dead_tup), 0) AS dead, count(*) FILTER (WHERE coalesce(last_analyze, last_autoanalyze) IS NOT NULL) AS analyzed,
                count(*) AS tables, pg_database_size(current_database()) AS bytes FROM pg_stat_user_tables`,
      );
      const row = r.rows[0];
      dbs[db] = { liveRows: Number(row?.live), deadRows: Number(row?.dead), bytes: Number(row?.bytes), analyzedTables: Number(row?.analyzed), tables: Number(row?.tables) };
    } catch (error) {
      return { dbs, error: `${db}: ${(error as Error).message}` };
    } finally {
      await c.end().catch(() => undefined);
    }
  }
  return { ...(autovacuum ? { autovacuum } : {}), dbs };
}
const fmtDbState = (d: DbState) =>
  d.error
    ? `not readable (${d.error})`
    : `autovacuum ${d.autovacuum ?? '?'}; ` +
      Object.entries(d.dbs)
        .map(([db, x]) => `${db} ${x.liveRows} rows, ${x.deadRows} dead, ${(x.bytes / 1e6).toFixed(0)} MB, ${x.analyzedTables}/${x.tables} tables analyzed`)
        .join('; ');

// ---------------------------------------------------------------- one step of open-loop arrivals

interface SagaRecord {
  /** ms after the step's t0. */
  readonly scheduledMs: number;
  readonly startedMs: number;
  doneMs?: number;
  outcome?: TaskRun['outcome'] | 'timeout';
  /** create → final status, as the producer measures it. */
  latencyMs?: number;
  error?: string;
  taskId?: string;
  byStep?: TaskRun['byStep'];
}

interface StepResult {
  readonly label: string;
  readonly kind: 'ladder' | 'refine' | 'half' | 'warmup';
  readonly attempt: number;
  readonly rate: number;
  readonly durationS: number;
  readonly offered: number;
  readonly started: number;
  readonly shed: number;
  readonly completed: number;
  readonly completedByDrain: number;
  readonly achievedPerS: number;
  readonly errors: number;
  readonly errorsByKind: Record<string, number>;
  readonly errorSamples: string[];
  readonly inFlightAtEnd: number;
  readonly inFlightBound: number;
  readonly inFlightMax: number;
  readonly inFlightSeries: { t: number; n: number }[];
  readonly sustained: boolean;
  readonly reasons: string[];
  readonly latencyMs: { p50: number; p90: number; p99: number; max: number; mean: number };
  readonly launchLagMs: { p99: number; max: number };
  readonly httpPerStep: number;
  readonly httpByStep: Partial<Record<Step, StepTally>>;
  /** Per step, the time completed sagas spent in it: where a saga's latency goes. */
  readonly stepLatencyMs: Partial<Record<Step, { p50: number; p99: number; max: number }>>;
  /** 429 RATE_LIMITED answers (waited out and sent again; included in the requests per step). */
  readonly rateLimited: number;
  /** Services whose /metrics could not be read (their counters are missing from serviceOutcomes and dedupTiers). */
  readonly metricsErrors: string[];
  readonly duplicated: number;
  readonly serviceOutcomes: Record<string, number>;
  readonly dedupTiers: Record<string, number>;
  readonly cpuMs: Partial<Record<Column | 'driver', number>>;
  readonly cpuMsPerSaga: Partial<Record<Column | 'driver', number>>;
  /** The same CPU per second of the window: flat when a process takes what the machine has left. */
  readonly cpuMsPerS: Partial<Record<Column | 'driver', number>>;
  readonly machineBusy: number;
  readonly machineCpuMsPerSaga: number;
  /** PostgreSQL CPU ms per saga split by what the process served; the service-db share is the stack's own. */
  readonly postgresMsPerSagaBy: Record<string, number>;
  /** Share of all cores used by processes outside the table (other work on the machine). */
  readonly otherBusy: number;
  readonly windowMs: number;
  readonly settleMs: number;
  readonly quiesceMs: number;
  readonly lagAfter: number;
}

interface Env {
  readonly admin: Admin;
  /** The platform admin: reads /metrics. */
  readonly platformAdmin: Actor;
  /** 429 answers so far, all steps. */
  readonly rateLimited: () => number;
  readonly groups: readonly string[];
  readonly targets: Partial<Record<Column, Target>>;
  readonly base: Omit<ScenarioContext, 'deadline'>;
  readonly duplicator: Duplicator;
  next: number;
}

async function runStep(env: Env, kind: StepResult['kind'], label: string, rate: number, durationS: number, attempt = 1): Promise<StepResult> {
  const offered = Math.max(1, Math.round(rate * durationS));
  const intervalMs = 1000 / rate;
  const endMs = durationS * 1000;
  const bound = Math.max(INFLIGHT_FLOOR, Math.ceil(rate * INFLIGHT_S));
  const records: SagaRecord[] = [];
  const pending: Promise<void>[] = [];
  let inFlight = 0;
  let inFlightMax = 0;
  let shed = 0;
  const series: { t: number; n: number }[] = [];
  const metricsBefore = await scrapeMetrics(env.platformAdmin);
  const dupBefore = env.duplicator.duplicated();
  const limitedBefore = env.rateLimited();
  const before = snapshot(env.targets);
  const t0 = performance.now();
  const sampler = setInterval(() => series.push({ t: Math.round(performance.now() - t0), n: inFlight }), 500);

  const launch = (scheduledMs: number) => {
    if (inFlight >= MAX_INFLIGHT) {
      shed++;
      return;
    }
    const rec: SagaRecord = { scheduledMs, startedMs: performance.now() - t0 };
    records.push(rec);
    inFlight++;
    inFlightMax = Math.max(inFlightMax, inFlight);
    const ctx: ScenarioContext = { ...env.base, deadline: Date.now() + TIMEOUT_MS };
    let timer: NodeJS.Timeout | undefined;
    const timedOut = new Promise<undefined>((resolve) => {
      timer = setTimeout(() => resolve(undefined), TIMEOUT_MS);
    });
    pending.push(
      Promise.race([runScenario(ctx, Scenario.happy, env.next++), timedOut])
        .then((run) => {
          rec.doneMs = performance.now() - t0;
          if (!run) {
            rec.outcome = 'timeout';
            rec.error = `not completed within ${TIMEOUT_MS / 1000} s`;
            return;
          }
          rec.outcome = run.outcome;
          rec.latencyMs = run.ms;
          rec.byStep = run.byStep;
          if (run.taskId) rec.taskId = run.taskId;
          if (run.error) rec.error = run.error;
          else if (run.outcome !== 'completed') rec.error = `ended ${run.outcome}`;
        })
        .catch((error: Error) => {
          rec.doneMs = performance.now() - t0;
          rec.outcome = 'error';
          rec.error = error.message;
        })
        .finally(() => {
          clearTimeout(timer);
          inFlight--;
        }),
    );
  };

  // Open loop: the i-th saga starts at t0 + i/R whatever the earlier ones are doing; a late timer
  // starts every saga that is due at once (the lag is recorded).
  for (let i = 0; i < offered; ) {
    const now = performance.now() - t0;
    while (i < offered && i * intervalMs <= now) launch(i++ * intervalMs);
    if (i < offered) await sleep(Math.max(1, Math.min(20, i * intervalMs - (performance.now() - t0))));
  }
  await sleep(Math.max(0, endMs - (performance.now() - t0)));
  const inFlightAtEnd = inFlight;
  series.push({ t: Math.round(performance.now() - t0), n: inFlight });
  const all = Promise.all(pending);
  await Promise.race([all, sleep(Math.max(0, endMs + DRAIN_S * 1000 - (performance.now() - t0)))]);
  // Every saga ends within TIMEOUT_MS of its start (the race above), so this wait is bounded.
  await all;
  clearInterval(sampler);
  const settleMs = performance.now() - t0;
  // Count the tail too: duplicates and the last events (TaskCompleted) consumed by every group.
  const q = await quiesce(env.admin, env.groups);
  const after = snapshot(env.targets);
  const metricsAfter = await scrapeMetrics(env.platformAdmin);
  const duplicated = env.duplicator.duplicated() - dupBefore;
  const rateLimited = env.rateLimited() - limitedBefore;

  const completedRecs = records.filter((r) => r.outcome === 'completed');
  const completed = completedRecs.length;
  const completedByDrain = completedRecs.filter((r) => (r.doneMs ?? Infinity) <= endMs + DRAIN_S * 1000).length;
  const errorsByKind: Record<string, number> = {};
  for (const r of records) if (r.outcome !== 'completed') errorsByKind[r.outcome ?? 'unknown'] = (errorsByKind[r.outcome ?? 'unknown'] ?? 0) + 1;
  if (shed > 0) errorsByKind.shed = shed;
  const errors = Object.values(errorsByKind).reduce((a, b) => a + b, 0);
  const achievedPerS = completedByDrain / durationS;
  const reasons: string[] = [];
  if (errors > 0) reasons.push(`${errors} saga error(s): ${Object.entries(errorsByKind).map(([k, v]) => `${k} ${v}`).join(', ')}`);
  if (achievedPerS < MIN_ACHIEVED * rate) reasons.push(`achieved ${achievedPerS.toFixed(1)}/s < ${(MIN_ACHIEVED * 100).toFixed(0)}% of ${fmtRate(rate)}/s`);
  if (inFlightAtEnd > bound) reasons.push(`${inFlightAtEnd} in flight at the end > bound ${bound}`);
  const lat = completedRecs.map((r) => r.latencyMs ?? NaN).filter(Number.isFinite).sort((a, b) => a - b);
  const lags = records.map((r) => r.startedMs - r.scheduledMs).sort((a, b) => a - b);
  const httpByStep: Partial<Record<Step, StepTally>> = {};
  for (const r of records) {
    for (const [step, t] of Object.entries(r.byStep ?? {}) as [Step, StepTally][]) {
      const was = httpByStep[step] ?? { steps: 0, requests: 0, ms: 0 };
      httpByStep[step] = { steps: was.steps + t.steps, requests: was.requests + t.requests, ms: was.ms + t.ms };
    }
  }
  const perStep = new Map<Step, number[]>();
  for (const r of completedRecs) {
    for (const [step, t] of Object.entries(r.byStep ?? {}) as [Step, StepTally][]) {
      const times = perStep.get(step);
      if (times) times.push(t.ms);
      else perStep.set(step, [t.ms]);
    }
  }
  const stepLatencyMs = Object.fromEntries(
    [...perStep].map(([step, ms]) => {
      const sorted = ms.sort((a, b) => a - b);
      return [step, { p50: percentile(sorted, 50), p99: percentile(sorted, 99), max: sorted.at(-1) ?? NaN }];
    }),
  ) as StepResult['stepLatencyMs'];
  const tot = Object.values(httpByStep).reduce((a, t) => ({ steps: a.steps + t.steps, requests: a.requests + t.requests }), { steps: 0, requests: 0 });
  const cpu = cpuDelta(before, after);
  const perSaga = Object.fromEntries(Object.entries(cpu.ms).map(([k, v]) => [k, completed > 0 && v !== undefined ? v / completed : NaN])) as Partial<Record<Column | 'driver', number>>;
  return {
    label,
    kind,
    attempt,
    rate,
    durationS,
    offered,
    started: records.length,
    shed,
    completed,
    completedByDrain,
    achievedPerS,
    errors,
    errorsByKind,
    errorSamples: records
      .filter((r) => r.outcome !== 'completed')
      .slice(0, 10)
      .map((r) => `${r.outcome}${r.taskId ? ` task ${r.taskId}` : ''}: ${r.error ?? ''}`),
    inFlightAtEnd,
    inFlightBound: bound,
    inFlightMax,
    inFlightSeries: series,
    sustained: reasons.length === 0,
    reasons,
    latencyMs: { p50: percentile(lat, 50), p90: percentile(lat, 90), p99: percentile(lat, 99), max: lat.at(-1) ?? NaN, mean: lat.length ? lat.reduce((a, b) => a + b, 0) / lat.length : NaN },
    launchLagMs: { p99: percentile(lags, 99), max: lags.at(-1) ?? NaN },
    httpPerStep: tot.steps === 0 ? NaN : tot.requests / tot.steps,
    httpByStep,
    stepLatencyMs,
    rateLimited,
    metricsErrors: [...new Set([...metricsBefore.failed, ...metricsAfter.failed])],
    duplicated,
    serviceOutcomes: diffCounts(metricsBefore.outcomes, metricsAfter.outcomes),
    dedupTiers: diffCounts(metricsBefore.dedupTiers, metricsAfter.dedupTiers),
    cpuMs: cpu.ms,
    cpuMsPerSaga: perSaga,
    cpuMsPerS: Object.fromEntries(Object.entries(cpu.ms).map(([k, v]) => [k, v === undefined ? NaN : v / (cpu.wallMs / 1000)])),
    machineBusy: cpu.machineBusy,
    machineCpuMsPerSaga: completed > 0 ? cpu.machineMs / completed : NaN,
    postgresMsPerSagaBy: Object.fromEntries(Object.entries(cpu.pgMs).map(([k, v]) => [k, completed > 0 ? v / completed : NaN])),
    otherBusy: Math.max(0, cpu.otherMs / Math.max(1, cpu.wallMs * os.cpus().length)),
    windowMs: cpu.wallMs,
    settleMs,
    quiesceMs: q.ms,
    lagAfter: q.lag,
  };
}

function describe(s: StepResult): string {
  const cpu = COLUMNS.filter((c) => c !== 'redis')
    .map((c) => `${c.replace('-svc', '')} ${fmt1(s.cpuMsPerSaga[c])}`)
    .join(' ');
  return (
    `  ${s.label.padEnd(18)} R=${fmtRate(s.rate)}/s ${s.started} sagas  achieved ${s.achievedPerS.toFixed(1)}/s  in flight at end ${s.inFlightAtEnd} (bound ${s.inFlightBound}, max ${s.inFlightMax})  ` +
    `p50 ${fmtMs(s.latencyMs.p50)} p99 ${fmtMs(s.latencyMs.p99)}  errors ${s.errors}  → ${s.sustained ? 'sustained' : `NOT sustained (${s.reasons.join('; ')})`}\n` +
    `      cpu ms/saga: ${cpu} driver ${fmt1(s.cpuMsPerSaga.driver)} redis ${fmt1(s.cpuMsPerSaga.redis)} (postgres on the service dbs ${fmt1(s.postgresMsPerSagaBy['service-db backends'])}); ` +
    `machine ${(s.machineBusy * 100).toFixed(0)}% busy, ${(s.otherBusy * 100).toFixed(0)}% by other processes; ` +
    `http/step ${s.httpPerStep.toFixed(2)}${s.rateLimited > 0 ? ` (${s.rateLimited} answered 429, waited out)` : ''}; ${s.duplicated} duplicates delivered, services dropped ${s.serviceOutcomes.duplicate ?? 0}; launch lag p99 ${fmtMs(s.launchLagMs.p99)}; ` +
    `tail ${((s.settleMs - s.durationS * 1000) / 1000).toFixed(1)} s + quiesce ${(s.quiesceMs / 1000).toFixed(1)} s${s.lagAfter !== 0 ? ` (lag still ${s.lagAfter})` : ''}`
  );
}

// ---------------------------------------------------------------- pre-flight

async function checkStack(): Promise<string[]> {
  const problems: string[] = [];
  await Promise.all(
    SERVICES.map(async ([svc, url]) => {
      try {
        const res = await fetch(`${url}/readyz`, { signal: AbortSignal.timeout(3_000) });
        if (res.status !== 200) problems.push(`${svc} at ${url}: /readyz answered ${res.status} ${(await res.text()).slice(0, 200)}`);
      } catch (error) {
        const cause = (error as { cause?: { code?: string; message?: string } }).cause;
        problems.push(`${svc} at ${url}: ${cause?.code ?? cause?.message ?? (error as Error).message}`);
      }
    }),
  );
  return problems;
}

function gitInfo(): { commit: string; dirty: boolean } {
  const root = join(dirname(fileURLToPath(import.meta.url)), '..');
  const git = (...a: string[]) => {
    try {
      return execFileSync('git', a, { cwd: root, encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).trim();
    } catch {
      return '';
    }
  };
  return { commit: git('rev-parse', 'HEAD') || 'unknown', dirty: git('status', '--porcelain', '--untracked-files=no') !== '' };
}

const withTimeout = <T>(p: Promise<T>, ms: number, what: string): Promise<T> =>
  Promise.race([
    p,
    new Promise<never>((_, reject) => {
      setTimeout(() => reject(new Error(`${what}: no answer within ${ms / 1000} s`)), ms).unref();
    }),
  ]);

// ---------------------------------------------------------------- main

async function main(): Promise<number> {
  const startedAt = new Date();
  const t0 = performance.now();
  const code = gitInfo();
  progress(
    `saga bench: rates ${RATES.join(', ')} /s, ${STEP_S} s per step (+ drain ${DRAIN_S} s), half-load run ${HALF_S} s, duplicates ${DUP_RATE}, saga timeout ${TIMEOUT_MS / 1000} s, ` +
      `Prefer: wait=${WAIT_S}, ${ANNOTATORS} annotators, ${REVIEWERS} reviewers, ${MANAGERS} managers, retries ${RETRIES}, refine ${REFINE}, time budget ${MAX_RUN_MS / 1000} s`,
  );
  progress(`code: ${code.commit.slice(0, 10)}${code.dirty ? ' + local changes' : ''}; services ${SERVICES.map(([s, u]) => `${s}=${u}`).join(' ')} kafka=${BROKERS.join(',')} prefix=${PREFIX}`);

  const problems = await checkStack();
  if (problems.length > 0) {
    console.error(`saga bench could not run: the stack is not up (GET /readyz):\n  ${problems.join('\n  ')}\nStart it with \`npm start\` (or point --task-url/--label-url/--qa-url/--billing-url at it) and run again.`);
    return 1;
  }
  const kafka = new Kafka({ clientId: 'bench-saga', brokers: BROKERS, logLevel: logLevel.NOTHING, connectionTimeout: 3_000, retry: { retries: 2 } });
  const admin = kafka.admin();
  try {
    await withTimeout(admin.connect(), 15_000, 'kafka admin connect');
    const existing = new Set(await admin.listTopics());
    const missing = TOPICS.filter((t) => !existing.has(t));
    if (missing.length > 0) throw new Error(`topics ${missing.join(', ')} do not exist (is --prefix ${PREFIX} the services' KAFKA_TOPIC_PREFIX?)`);
  } catch (error) {
    console.error(`saga bench could not run: Kafka at ${BROKERS.join(',')}: ${(error as Error).message}`);
    await admin.disconnect().catch(() => undefined);
    return 1;
  }

  const { targets, notes } = findTargets();
  const dbBefore = await dbState();
  progress(`service databases at the start: ${fmtDbState(dbBefore)}`);
  if (dbBefore.autovacuum === 'off') {
    notes.push(
      `PostgreSQL runs with autovacuum = off: the services' tables are never vacuumed nor analyzed, dead rows pile up run after run (${Object.values(dbBefore.dbs).reduce((a, x) => a + x.deadRows, 0)} at the start) and PostgreSQL's cost per saga depends on what ran before`,
    );
  }
  for (const col of COLUMNS) {
    const t = targets[col];
    if (t) progress(`cpu ${col.padEnd(11)} pid ${t.pids.join(',')} (${t.how})`);
  }
  for (const n of notes) progress(`note: ${n}`);

  // One funded project for every saga the run can start (the whole ladder and the half-load run).
  const planned = (RATES.reduce((a, r) => a + r, 0) + REFINE * Math.max(...RATES)) * STEP_S * (1 + RETRIES) + (Math.max(...RATES) / 2) * HALF_S + 10 * WARMUP_S;
  const budget = Math.ceil(planned * 1.2 + 100) * PRICE;
  let rateLimited = 0;
  const services = (actor: Actor, onRequest?: () => void): Services => {
    // A long poll lasts up to WAIT_S: the request timeout must outlast it (as the producer does).
    const options = { timeoutMs: WAIT_S * 1000 + 10_000, authorization: actor.authorization, onRateLimited: () => rateLimited++, ...(onRequest ? { onRequest } : {}) };
    return { task: client(URLS.task, options), label: client(URLS.label, options), qa: client(URLS.qa, options), billing: client(URLS.billing, options) };
  };
  let platformAdmin: Actor;
  let projectId: string;
  let signer: Awaited<ReturnType<typeof devSigner>>;
  try {
    signer = await devSigner({ issuer: process.env.AUTH_ISSUER || DEV_ISSUER, audience: process.env.AUTH_AUDIENCE || DEV_AUDIENCE });
    platformAdmin = adminOf(signer, 'bench-admin');
    const res = await services(platformAdmin).billing<{ projectId: string }>('POST', '/projects', { name: `bench saga ${startedAt.toISOString()}`, budget, pricePerTask: PRICE });
    if (res.status === 401) throw new Error(`the services refuse the bench's token (${JSON.stringify(res.body)}): start them with npm start, which configures them with the key the bench signs with (LABELFLOW_SIGNING_KEY_FILE, default .local/auth/dev-signing-key.json)`);
    if (res.status !== 201) throw new Error(`${res.status} ${JSON.stringify(res.body)}`);
    projectId = res.body.projectId;
  } catch (error) {
    console.error(`saga bench could not run: cannot create the project: ${(error as Error).message}`);
    await admin.disconnect().catch(() => undefined);
    return 1;
  }
  const cast = castFor(signer, platformAdmin, [projectId], { annotators: ANNOTATORS, reviewers: REVIEWERS, managers: MANAGERS });
  progress(`project ${projectId}: budget ${budget} cents at ${PRICE} per task (room for ${Math.floor(budget / PRICE)} sagas)`);

  // The duplicator joins a fresh group of its own: find it (new since the listing) to delete it at the end.
  const groupsBefore = new Set((await admin.listGroups()).groups.map((g) => g.groupId));
  let duplicator: Duplicator;
  try {
    duplicator = await startDuplicator({ brokers: BROKERS, topics: TOPICS, rate: DUP_RATE, seed: SEED });
  } catch (error) {
    console.error(`saga bench could not run: the duplicator did not start: ${(error as Error).message}`);
    await admin.disconnect().catch(() => undefined);
    return 1;
  }
  const dupGroups = (await admin.listGroups()).groups.map((g) => g.groupId).filter((g) => g.startsWith('labelflow-duplicator-') && !groupsBefore.has(g));
  const groups = [...SERVICES.map(([svc]) => `${PREFIX}.${svc}`), ...dupGroups];
  let state = SEED ^ 0x5bd1e995;
  const env: Env = {
    admin,
    platformAdmin,
    rateLimited: () => rateLimited,
    groups,
    targets,
    duplicator,
    next: 0,
    base: {
      services: (onRequest, actor) => services(actor, onRequest),
      cast,
      waitS: WAIT_S,
      projectId,
      starvedProjectId: projectId, // happy path only: never used
      random: () => ((state = (state * 1_103_515_245 + 12_345) % 2 ** 31) / 2 ** 31),
    },
  };
  let interrupted = false;
  const onSigint = () => {
    if (interrupted) process.exit(130);
    interrupted = true;
    progress('SIGINT: finishing the current step, then reporting (again to quit at once)');
  };
  process.on('SIGINT', onSigint);

  const steps: StepResult[] = [];
  let half: StepResult | undefined;
  let warmup: StepResult | undefined;
  let idle: { cpuMsPerS: Partial<Record<Column | 'driver', number>>; postgresMsPerSBy: Record<string, number>; machineBusy: number; otherBusy: number } | undefined;
  let stoppedBy = '';
  let budgetNote = '';
  /** The highest sustained rate: of the ladder, then of the refinement between it and the first rate that was not. */
  let best = 0;
  let failed: string | undefined;
  const runNotes: string[] = [...notes];
  try {
    if (WARMUP_S > 0) {
      const r = Math.min(10, RATES[0] ?? 10);
      progress(`warm-up: ${r}/s for ${WARMUP_S} s (not reported in the table)`);
      warmup = await runStep(env, 'warmup', 'warm-up', r, WARMUP_S);
      progress(describe(warmup));
      if (warmup.errors > 0) runNotes.push(`warm-up had ${warmup.errors} error(s): ${warmup.errorSamples.slice(0, 3).join(' | ')}`);
    }
    // Idle baseline: what the stack burns with no saga running (sweepers, heartbeats, polls).
    await sleep(1_000);
    const i0 = snapshot(targets);
    await sleep(3_000);
    const i1 = snapshot(targets);
    const d = cpuDelta(i0, i1);
    const perS = (v: number | undefined) => (v ?? NaN) / (d.wallMs / 1000);
    idle = {
      cpuMsPerS: Object.fromEntries(Object.entries(d.ms).map(([k, v]) => [k, perS(v)])),
      postgresMsPerSBy: Object.fromEntries(Object.entries(d.pgMs).map(([k, v]) => [k, perS(v)])),
      machineBusy: d.machineBusy,
      otherBusy: Math.max(0, d.otherMs / Math.max(1, d.wallMs * os.cpus().length)),
    };
    progress(
      `idle baseline (CPU ms per second, no sagas): ${Object.entries(idle.cpuMsPerS).map(([k, v]) => `${k} ${fmt1(v)}`).join(', ')} (postgres on the service dbs ${fmt1(idle.postgresMsPerSBy['service-db backends'])}); ` +
        `machine ${(d.machineBusy * 100).toFixed(0)}% busy, ${(idle.otherBusy * 100).toFixed(0)}% by other processes`,
    );
    if (idle.otherBusy > 0.1 || (idle.postgresMsPerSBy['other backends'] ?? 0) > 100) {
      runNotes.push(
        `other work shares this machine: at rest ${(idle.otherBusy * 100).toFixed(0)}% of all cores went to processes outside the table and PostgreSQL spent ${fmt1(idle.postgresMsPerSBy['other backends'])} ms/s on other databases; throughput and CPU columns are pessimistic`,
      );
    }

    const reserve = (HALF_S + DRAIN_S + 10) * 1000;
    /** One rate, retried while not sustained; 'budget' if the next attempt would not fit in --max-run-s. */
    const tryRate = async (kind: 'ladder' | 'refine', rate: number, tag: string): Promise<'passed' | 'failed' | 'budget' | 'interrupted'> => {
      for (let attempt = 1; attempt <= 1 + RETRIES; attempt++) {
        if (interrupted) return 'interrupted';
        const elapsed = performance.now() - t0;
        if (elapsed + (STEP_S + DRAIN_S + 5) * 1000 + reserve > MAX_RUN_MS) {
          budgetNote = `time budget (--max-run-s ${MAX_RUN_MS / 1000}): ${Math.round(elapsed / 1000)} s elapsed before ${fmtRate(rate)}/s${attempt > 1 ? ` attempt ${attempt}` : ''}`;
          return 'budget';
        }
        progress(`${tag}: ${fmtRate(rate)} sagas/s for ${STEP_S} s${attempt > 1 ? ` (attempt ${attempt}: the first was not sustained)` : ''}`);
        const s = await runStep(env, kind, `${fmtRate(rate)}/s${kind === 'refine' ? ' (refine)' : ''}${attempt > 1 ? ` #${attempt}` : ''}`, rate, STEP_S, attempt);
        steps.push(s);
        progress(describe(s));
        if (s.sustained) return 'passed';
      }
      return 'failed';
    };
    let failedAt: number | undefined;
    for (const [index, rate] of RATES.entries()) {
      const r = await tryRate('ladder', rate, `step ${index + 1}/${RATES.length}`);
      if (r === 'passed') {
        best = rate;
        if (index === RATES.length - 1) stoppedBy = `the last rate of the ladder (--max-rate ${MAX_RATE}) was sustained`;
        continue;
      }
      if (r === 'failed') {
        failedAt = rate;
        stoppedBy = `${fmtRate(rate)}/s was not sustained${RETRIES > 0 ? ` in ${1 + RETRIES} attempts` : ''}`;
      }
      break;
    }
    // Refine: bisect between the highest sustained rate and the first that was not, --refine times.
    const refined: string[] = [];
    for (let k = 0; k < REFINE && failedAt !== undefined && !budgetNote && !interrupted; k++) {
      const mid = Math.round((best + failedAt) / 2);
      if (mid <= best || mid >= failedAt) break;
      const r = await tryRate('refine', mid, `refine ${k + 1}/${REFINE} between ${fmtRate(best)} and ${fmtRate(failedAt)}/s`);
      if (r === 'passed') best = mid;
      else if (r === 'failed') failedAt = mid;
      else break;
      refined.push(`${fmtRate(mid)}/s ${r === 'passed' ? 'sustained' : 'not sustained'}`);
    }
    if (refined.length > 0) stoppedBy += `; refined: ${refined.join(', ')}`;
    if (budgetNote) stoppedBy = stoppedBy ? `${stoppedBy}; then the ${budgetNote}` : budgetNote;
    if (interrupted) stoppedBy = `interrupted (SIGINT)${stoppedBy ? ` after: ${stoppedBy}` : ''}`;

    const halfRate = best > 0 ? best / 2 : (RATES[0] ?? 10) / 2;
    if (!interrupted) {
      progress(`half-load run: ${fmtRate(halfRate)} sagas/s for ${HALF_S} s${best > 0 ? ` (half of ${fmtRate(best)}/s)` : ' (NO rate was sustained: half of the lowest rate instead)'}`);
      half = await runStep(env, 'half', `half load ${fmtRate(halfRate)}/s`, halfRate, HALF_S);
      progress(describe(half));
    }
  } catch (error) {
    failed = error instanceof Error ? `${error.name}: ${error.message}` : String(error);
    progress(`bench failed: ${failed}`);
  } finally {
    process.off('SIGINT', onSigint);
    await duplicator.stop().catch((error: Error) => progress(`cleanup: duplicator stop failed: ${error.message}`));
    if (dupGroups.length > 0) await admin.deleteGroups(dupGroups).catch((error: Error) => progress(`cleanup: delete group ${dupGroups.join(',')} failed: ${error.message}`));
    await admin.disconnect().catch(() => undefined);
  }
  const dbAfter = await dbState();
  progress(`service databases at the end: ${fmtDbState(dbAfter)}`);
  if (steps.length === 0) {
    console.error(`saga bench could not run${failed ? `: ${failed}` : stoppedBy ? `: ${stoppedBy}` : ''}`);
    return 1;
  }

  // ---------------------------------------------------------------- report
  const cols: [Column | 'driver', string][] = [
    ['task-svc', 'task-svc'],
    ['label-svc', 'label-svc'],
    ['qa-svc', 'qa-svc'],
    ['billing-svc', 'billing-svc'],
    ['postgres', 'PostgreSQL'],
    ['kafka', 'Kafka'],
    ['driver', 'driver'],
  ];
  const row = (s: StepResult) =>
    `| ${s.kind === 'half' ? `**half load** ${fmtRate(s.rate)}` : `${fmtRate(s.rate)}${s.kind === 'refine' ? ' (refine)' : ''}${s.attempt > 1 ? ` (#${s.attempt})` : ''}`} | ${s.started}${s.shed ? ` (+${s.shed} shed)` : ''} | ${s.achievedPerS.toFixed(1)} | ` +
    `${s.sustained ? 'yes' : 'no'} | ${s.errors} | ${s.inFlightAtEnd} / ${s.inFlightBound} | ${fmtMs(s.latencyMs.p50)} | ${fmtMs(s.latencyMs.p99)} | ` +
    `${cols.map(([c]) => fmt1(s.cpuMsPerSaga[c])).join(' | ')} | ${(s.machineBusy * 100).toFixed(0)}% | ${Number.isFinite(s.httpPerStep) ? s.httpPerStep.toFixed(2) : 'n/a'} | ${s.duplicated} |`;
  const table = [
    `| Offered R (sagas/s) | Sagas | Achieved/s | Sustained? | Errors | In flight at end / bound | p50 | p99 | ${cols.map(([, h]) => `${h} CPU ms/saga`).join(' | ')} | Machine busy | HTTP req/step | Kafka dups delivered |`,
    `|---:|---:|---:|---|---:|---:|---:|---:|${cols.map(() => '---:').join('|')}|---:|---:|---:|`,
    ...steps.map(row),
    ...(half ? [row(half)] : []),
  ].join('\n');
  console.log('\n' + table + '\n');
  const definition =
    `Sustained: open-loop arrivals at R/s for ${STEP_S} s (one saga every 1/R s, happy path, ${DUP_RATE * 100}% of Kafka messages delivered twice); ` +
    `no saga error (an error answer, a status other than completed, no completion within ${TIMEOUT_MS / 1000} s, or shed at ${MAX_INFLIGHT} in flight), ` +
    `achieved/s = sagas of the step completed by the end of the step + ${DRAIN_S} s drain, ÷ ${STEP_S} s, ≥ ${MIN_ACHIEVED * 100}% of R, ` +
    `and in flight at the end of the step ≤ max(${INFLIGHT_FLOOR}, R × ${INFLIGHT_S} s). A step that fails is run ${RETRIES} more time(s) before the ladder stops; then up to ${REFINE} bisection step(s) between the highest sustained rate and the first that was not.`;
  const cpuNote =
    'CPU ms/saga: utime+stime (/proc/<pid>/stat) from the first arrival until every saga of the step ended and every consumer group had committed everything (duplicates and the tail events included), ÷ completed sagas; ' +
    'PostgreSQL = postmaster + live children + cutime/cstime (backends that ended), every database (the JSON splits it: the services\' four databases, others, background, exited); ' +
    'driver = process.cpuUsage() of this process (load generator and duplicator). Gross: includes idle background work (see the idle baseline in the JSON).';
  console.log(definition);
  console.log(cpuNote);
  console.log(`Ladder stopped: ${stoppedBy || 'n/a'}.`);
  const bestNote =
    best > 0 && stoppedBy.startsWith('time budget') ? ' (a lower bound: the time budget ended the ladder)' : best > 0 && stoppedBy.startsWith('the last rate') ? ' (a lower bound: the ladder ended at --max-rate)' : '';
  console.log(`SUSTAINED highest: ${best > 0 ? `${fmtRate(best)} sagas/s${bestNote}` : 'none (not even the lowest rate)'} vs target ≥ ${SUSTAIN_TARGET} sagas/s → ${best >= SUSTAIN_TARGET ? 'PASS' : 'MISS'}`);
  if (half) {
    console.log(
      `LATENCY at half load (${fmtRate(half.rate)} sagas/s, ${half.completed} sagas, ${half.errors} errors): p50 ${fmtMs(half.latencyMs.p50)}, p99 ${fmtMs(half.latencyMs.p99)} vs target p99 < ${P99_TARGET_MS} ms → ` +
        `${half.errors === 0 && half.latencyMs.p99 < P99_TARGET_MS ? 'PASS' : 'MISS'}${best === 0 ? ' (no sustained rate: this is half of the lowest offered rate)' : ''}`,
    );
    console.log(
      `  by step (p50 / p99 / max): ${Object.entries(half.stepLatencyMs)
        .map(([step, l]) => `${step} ${fmtMs(l.p50)} / ${fmtMs(l.p99)} / ${fmtMs(l.max)}`)
        .join(', ')}`,
    );
  } else {
    console.log('LATENCY at half load: not measured (the run stopped before it)');
  }
  const odd: string[] = [];
  for (const s of [...(warmup ? [warmup] : []), ...steps, ...(half ? [half] : [])]) {
    for (const [outcome, n] of Object.entries(s.serviceOutcomes)) if (!['applied', 'duplicate', 'ignored'].includes(outcome)) odd.push(`${s.label}: services counted ${n} message(s) '${outcome}'`);
    if (s.errorSamples.length > 0) odd.push(`${s.label}: ${s.errors} error(s), e.g. ${s.errorSamples.slice(0, 3).join(' | ')}`);
    if (s.lagAfter !== 0) odd.push(`${s.label}: consumer lag still ${s.lagAfter} after ${QUIESCE_MS / 1000} s (CPU window cut there)`);
    if (s.launchLagMs.p99 > 100) odd.push(`${s.label}: the driver started sagas late (launch lag p99 ${fmtMs(s.launchLagMs.p99)}): the load generator itself is short of CPU`);
    if (s.duplicated === 0 && DUP_RATE > 0) odd.push(`${s.label}: the duplicator delivered no duplicates`);
    if (s.metricsErrors.length > 0) odd.push(`${s.label}: /metrics not read (service counters incomplete): ${s.metricsErrors.join('; ')}`);
    if (s.rateLimited > 0) odd.push(`${s.label}: ${s.rateLimited} request(s) answered 429 RATE_LIMITED (per-subject limit) and were sent again after Retry-After: the sagas waited on the limit, not on the stack; raise --managers, --reviewers or --annotators`);
    const pgOther = s.postgresMsPerSagaBy['other backends'] ?? 0;
    if (s.otherBusy > 0.1 || pgOther > 0.2 * (s.cpuMsPerSaga.postgres ?? Infinity)) {
      odd.push(`${s.label}: other work on the machine: ${(s.otherBusy * 100).toFixed(0)}% of all cores outside the table, PostgreSQL ${fmt1(pgOther)} ms/saga on other databases`);
    }
  }
  for (const n of [...runNotes, ...odd]) console.log(`NOTE ${n}`);
  if (failed) console.log(`NOTE the run stopped early: ${failed}`);

  const here = dirname(fileURLToPath(import.meta.url));
  const outDir = join(here, 'results');
  mkdirSync(outDir, { recursive: true });
  const file = join(outDir, `saga-${startedAt.toISOString().replace(/[:.]/g, '-')}.json`);
  const report = {
    startedAt: startedAt.toISOString(),
    durationS: Math.round((performance.now() - t0) / 1000),
    command: `npm run bench:saga -- ${process.argv.slice(2).join(' ')}`.trim(),
    args: {
      rates: RATES,
      maxRate: MAX_RATE,
      stepS: STEP_S,
      drainS: DRAIN_S,
      halfS: HALF_S,
      warmupS: WARMUP_S,
      duplicates: DUP_RATE,
      timeoutS: TIMEOUT_MS / 1000,
      waitS: WAIT_S,
      minAchieved: MIN_ACHIEVED,
      inFlightS: INFLIGHT_S,
      inFlightFloor: INFLIGHT_FLOOR,
      maxInFlight: MAX_INFLIGHT,
      retries: RETRIES,
      refine: REFINE,
      quiesceS: QUIESCE_MS / 1000,
      maxRunS: MAX_RUN_MS / 1000,
      annotators: ANNOTATORS,
      reviewers: REVIEWERS,
      managers: MANAGERS,
      price: PRICE,
      seed: SEED,
      urls: URLS,
      brokers: BROKERS,
      prefix: PREFIX,
    },
    code,
    machine: { cpus: os.cpus().length, cpuModel: os.cpus()[0]?.model, totalMemBytes: os.totalmem(), platform: `${os.platform()} ${os.release()}`, node: process.version, loadavg: os.loadavg(), clkTck: CLK_TCK },
    processes: Object.fromEntries(Object.entries(targets).map(([k, t]) => [k, { pids: t.pids, how: t.how }])),
    projectId,
    databases: { before: dbBefore, after: dbAfter },
    definition,
    cpuNote,
    idleBaseline: idle,
    warmup,
    steps,
    halfLoad: half,
    summary: {
      highestSustained: best,
      sustainedTarget: SUSTAIN_TARGET,
      sustainedMet: best >= SUSTAIN_TARGET,
      stoppedBy,
      halfLoadRate: half?.rate,
      halfLoadP50Ms: half?.latencyMs.p50,
      halfLoadP99Ms: half?.latencyMs.p99,
      p99TargetMs: P99_TARGET_MS,
      p99Met: half ? half.errors === 0 && half.latencyMs.p99 < P99_TARGET_MS : false,
      notes: [...runNotes, ...odd],
      ...(failed ? { stoppedEarly: failed } : {}),
    },
    table,
  };
  writeFileSync(file, JSON.stringify(report, null, 2) + '\n');
  console.log(`\nresults: ${file}`);
  return 0;
}

runBench('saga', main);
