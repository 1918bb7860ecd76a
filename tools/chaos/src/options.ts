import { join, resolve } from 'node:path';
import { parseArgs } from 'node:util';

/** Everything a chaos run is made of. Defaults scale with `tasks` (`chaosDefaults`). */
export interface ChaosOptions {
  readonly tasks: number;
  /** Fraction of Kafka messages the producer's duplicator delivers a second time. */
  readonly duplicates: number;
  readonly seed: number;
  readonly concurrency: number;
  readonly annotators: number;
  readonly price: number;
  /** Scenario rates, as in the e2e mixed run; the rest of the tasks take the happy path. */
  readonly rates: { readonly reject: number; readonly billingFail: number; readonly qaTimeout: number; readonly cancel: number };
  /** SIGKILL + restart of each of the four services, this many times each. */
  readonly killsPerService: number;
  /** `pg_terminate_backend` of every service connection, this many times. */
  readonly pgDrops: number;
  /** How long Redis stays stopped. */
  readonly redisOutageMs: number;
  /** How long the paused service stays SIGSTOPped; must exceed `SESSION_TIMEOUT_MS`. */
  readonly pauseMs: number;
  /** qa-svc's review SLA: short, so `qa_timeout` tasks finish, yet longer than any fault stalls a review. */
  readonly qaSlaMs: number;
  /** Faults start between these fractions of the tasks done. */
  readonly window: readonly [number, number];
  /** The whole run (infrastructure, load, faults, checks, cleanup) is cut off after this long. */
  readonly maxRunMs: number;
  /** How long the stack may take to come to rest after the load (outboxes drained, lag 0). */
  readonly quiesceMs: number;
  /** How long each service may take to be ready again after a fault before it is a finding. */
  readonly recoveryMs: number;
  /** Where service, broker and database logs are kept. */
  readonly logDir: string;
}

/** The stack's consumer session timeout (libs/testing's startStack sets KAFKA_SESSION_TIMEOUT_MS=6000). */
export const SESSION_TIMEOUT_MS = 6_000;

/** The rates of e2e/mixed-run.e2e.spec.ts: every failure type. */
export const MIXED_RATES = { reject: 0.15, billingFail: 0.05, qaTimeout: 0.03, cancel: 0.05 } as const;

/**
 * The defaults for `tasks` tasks. A 10,000-task run gets 3 kills per service, 3 connection drops, a
 * 30 s Redis outage and a 9 s pause; shorter runs get fewer kills (at least 1 each) and a Redis
 * outage scaled down to no less than 5 s, so that every fault still lands while tasks are in flight.
 */
export function chaosDefaults(tasks: number): Omit<ChaosOptions, 'tasks' | 'duplicates' | 'seed' | 'logDir'> {
  return {
    concurrency: 24,
    annotators: 12,
    price: 40,
    rates: MIXED_RATES,
    killsPerService: Math.max(1, Math.ceil((3 * tasks) / 10_000)),
    pgDrops: 3,
    redisOutageMs: Math.round(Math.min(30_000, Math.max(5_000, (30_000 * tasks) / 5_000))),
    pauseMs: SESSION_TIMEOUT_MS + 3_000,
    qaSlaMs: 15_000,
    window: [0.05, 0.8],
    // Setup, checks and cleanup take a minute or two; the load gets 300 ms a task on top (a 2-core
    // machine does 3-6 tasks/s at concurrency 24 with the faults running).
    maxRunMs: 10 * 60_000 + tasks * 300,
    quiesceMs: 180_000,
    recoveryMs: 120_000,
  };
}

/** Every problem with the options, one line each; empty when they can run. */
export function validateOptions(o: ChaosOptions): string[] {
  const problems: string[] = [];
  const int = (name: string, v: number, min: number) => {
    if (!Number.isInteger(v) || v < min) problems.push(`${name} must be an integer >= ${min}, got ${v}`);
  };
  const fraction = (name: string, v: number) => {
    if (!Number.isFinite(v) || v < 0 || v > 1) problems.push(`${name} must be a fraction between 0 and 1, got ${v}`);
  };
  int('--tasks', o.tasks, 1);
  int('--seed', o.seed, 0);
  int('--concurrency', o.concurrency, 1);
  int('--annotators', o.annotators, 2);
  int('--price', o.price, 1);
  int('--kills-per-service', o.killsPerService, 1);
  int('--pg-drops', o.pgDrops, 1);
  fraction('--duplicates', o.duplicates);
  fraction('--reject', o.rates.reject);
  fraction('--billing-fail', o.rates.billingFail);
  fraction('--qa-timeout', o.rates.qaTimeout);
  fraction('--cancel', o.rates.cancel);
  if (o.rates.reject + o.rates.billingFail + o.rates.qaTimeout + o.rates.cancel > 1) problems.push('the scenario rates add up to more than 1');
  if (!(o.redisOutageMs >= 1_000)) problems.push(`--redis-outage-s must be at least 1, got ${o.redisOutageMs / 1000}`);
  if (!(o.pauseMs > SESSION_TIMEOUT_MS)) problems.push(`--pause-s must be longer than the session timeout (${SESSION_TIMEOUT_MS / 1000} s), got ${o.pauseMs / 1000}`);
  int('--qa-sla-ms', o.qaSlaMs, 1_000);
  const [from, to] = o.window;
  if (!(from >= 0 && to <= 1 && from < to)) problems.push(`the fault window must be 0 <= from < to <= 1, got ${from}-${to}`);
  if (!(o.maxRunMs >= 60_000)) problems.push(`--max-minutes must be at least 1, got ${o.maxRunMs / 60_000}`);
  if (!(o.quiesceMs >= 1_000)) problems.push(`--quiesce-s must be at least 1, got ${o.quiesceMs / 1000}`);
  if (!(o.recoveryMs >= 1_000)) problems.push(`--recovery-s must be at least 1, got ${o.recoveryMs / 1000}`);
  return problems;
}

export const chaosUsage = `usage: npm run chaos -- [--tasks N] [--duplicates R] [--seed S]
  load:    [--concurrency C] [--annotators A] [--reject R] [--billing-fail R] [--qa-timeout R] [--cancel R] [--qa-sla-ms MS]
  faults:  [--kills-per-service K] [--pg-drops D] [--redis-outage-s S] [--pause-s S]
  faults between fractions of the tasks done: [--fault-window 0.05-0.8]
  bounds:  [--max-minutes M] [--quiesce-s S] [--recovery-s S]
  output:  [--log-dir DIR] [--json-out FILE] [--no-build]
Defaults scale with --tasks; see tools/chaos/README.md.`;

const chaosArgs = {
  tasks: { type: 'string', default: '1000' },
  duplicates: { type: 'string', default: '0.3' },
  seed: { type: 'string', default: '42' },
  concurrency: { type: 'string' },
  annotators: { type: 'string' },
  reject: { type: 'string' },
  'billing-fail': { type: 'string' },
  'qa-timeout': { type: 'string' },
  cancel: { type: 'string' },
  'qa-sla-ms': { type: 'string' },
  'kills-per-service': { type: 'string' },
  'pg-drops': { type: 'string' },
  'redis-outage-s': { type: 'string' },
  'pause-s': { type: 'string' },
  'max-minutes': { type: 'string' },
  'quiesce-s': { type: 'string' },
  'recovery-s': { type: 'string' },
  'fault-window': { type: 'string' },
  'log-dir': { type: 'string' },
  'json-out': { type: 'string' },
  'no-build': { type: 'boolean', default: false },
  help: { type: 'boolean', default: false },
} as const;

/** A command line, read: the run's options, or every problem with it (exit 2). */
export type ChaosArgs =
  | { readonly help: true }
  | { readonly help: false; readonly problems: readonly string[] }
  | { readonly help: false; readonly problems: readonly []; readonly options: ChaosOptions; readonly build: boolean; readonly jsonOut?: string };

/** A decimal number as written; anything else (empty, blank, hex, `Infinity`) is NaN, where `Number` reads '' as 0. */
const NUMBER = /^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$/;
const FRACTION = String.raw`(?:\d+\.?\d*|\.\d+)`;
const WINDOW = new RegExp(`^(${FRACTION})-(${FRACTION})$`);

/**
 * Reads `argv` (the arguments after `--`) into the run's options, defaults scaled to `--tasks`. Pure:
 * the log directory's default is `<repoRoot>/.local/chaos/<stamp>-seed<seed>`. A value that is no
 * number is refused as given, before any range is checked.
 */
export function parseChaosArgs(argv: readonly string[], at: { readonly repoRoot: string; readonly stamp: string }): ChaosArgs {
  let a;
  try {
    ({ values: a } = parseArgs({ args: [...argv], options: chaosArgs, strict: true, allowPositionals: false }));
  } catch (error) {
    return { help: false, problems: [(error as Error).message.split('\n')[0] ?? 'bad arguments'] };
  }
  if (a.help) return { help: true };
  const unread: string[] = [];
  const num = (name: keyof typeof chaosArgs, fallback: number): number => {
    const raw = a[name];
    if (raw === undefined || typeof raw === 'boolean') return fallback;
    if (NUMBER.test(raw)) return Number(raw);
    unread.push(`--${name} must be a number, got ${JSON.stringify(raw)}`);
    return NaN;
  };
  const text = (name: 'log-dir' | 'json-out'): string | undefined => {
    const raw = a[name];
    if (raw !== undefined && raw.trim() === '') unread.push(`--${name} must name a file or directory, got ${JSON.stringify(raw)}`);
    return raw;
  };
  const tasks = num('tasks', 1_000);
  const d = chaosDefaults(Number.isInteger(tasks) && tasks > 0 ? tasks : 1);
  const seed = num('seed', 42);
  let window = d.window;
  const rawWindow = a['fault-window'];
  if (rawWindow !== undefined) {
    const m = WINDOW.exec(rawWindow);
    if (m) window = [Number(m[1]), Number(m[2])];
    else unread.push(`--fault-window must be two fractions FROM-TO, e.g. 0.05-0.8, got ${JSON.stringify(rawWindow)}`);
  }
  const logDir = text('log-dir');
  const jsonOut = text('json-out');
  const options: ChaosOptions = {
    ...d,
    tasks,
    duplicates: num('duplicates', 0.3),
    seed,
    concurrency: num('concurrency', d.concurrency),
    annotators: num('annotators', d.annotators),
    rates: {
      reject: num('reject', MIXED_RATES.reject),
      billingFail: num('billing-fail', MIXED_RATES.billingFail),
      qaTimeout: num('qa-timeout', MIXED_RATES.qaTimeout),
      cancel: num('cancel', MIXED_RATES.cancel),
    },
    qaSlaMs: num('qa-sla-ms', d.qaSlaMs),
    killsPerService: num('kills-per-service', d.killsPerService),
    pgDrops: num('pg-drops', d.pgDrops),
    redisOutageMs: num('redis-outage-s', d.redisOutageMs / 1000) * 1000,
    pauseMs: num('pause-s', d.pauseMs / 1000) * 1000,
    maxRunMs: num('max-minutes', d.maxRunMs / 60_000) * 60_000,
    quiesceMs: num('quiesce-s', d.quiesceMs / 1000) * 1000,
    recoveryMs: num('recovery-s', d.recoveryMs / 1000) * 1000,
    window,
    logDir: resolve(logDir ?? join(at.repoRoot, '.local/chaos', `${at.stamp}-seed${Number.isFinite(seed) ? seed : 'x'}`)),
  };
  if (unread.length > 0) return { help: false, problems: unread };
  const problems = validateOptions(options);
  if (problems.length > 0) return { help: false, problems };
  return { help: false, problems: [], options, build: !a['no-build'], ...(jsonOut === undefined ? {} : { jsonOut: resolve(jsonOut) }) };
}
