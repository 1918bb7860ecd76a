// npm run chaos -- --tasks 1000 --duplicates 0.3
// Runs the producer's mixed scenarios against a private stack (its own Kafka, PostgreSQL, Redis and
// the four built services) while injecting a seeded schedule of faults, then quiesces, audits and
// looks for lost events. Prints a markdown report; exit 0 only if nothing was violated, unexpected or lost.
import { mkdirSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { repoRoot } from '@labelflow/testing';
import { chaosDefaults, MIXED_RATES, validateOptions, type ChaosOptions } from './options';
import { formatChaosReport, verdict } from './report';
import { runChaos } from './run';

const usage = `usage: npm run chaos -- [--tasks N] [--duplicates R] [--seed S]
  load:    [--concurrency C] [--annotators A] [--reject R] [--billing-fail R] [--qa-timeout R] [--cancel R] [--qa-sla-ms MS]
  faults:  [--kills-per-service K] [--pg-drops D] [--redis-outage-s S] [--pause-s S]
  faults between fractions of the tasks done: [--fault-window 0.05-0.8]
  bounds:  [--max-minutes M] [--quiesce-s S] [--recovery-s S]
  output:  [--log-dir DIR] [--json-out FILE] [--no-build]
Defaults scale with --tasks; see tools/chaos/README.md.`;

/** The options, or exit 2 with the usage. */
function readArgs() {
  try {
    return parseArgs({ options: chaosArgs }).values;
  } catch (error) {
    console.error(`${(error as Error).message}\n${usage}`);
    process.exit(2);
  }
}

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
const a = readArgs();

if (a.help) {
  console.log(usage);
  process.exit(0);
}

const num = (v: string | undefined, fallback: number) => (v === undefined ? fallback : Number(v));
const tasks = Number(a.tasks);
const d = chaosDefaults(Number.isInteger(tasks) && tasks > 0 ? tasks : 1);
const seed = Number(a.seed);
const stamp = new Date().toISOString().replace(/[:.]/g, '-');
const options: ChaosOptions = {
  ...d,
  tasks,
  duplicates: Number(a.duplicates),
  seed,
  concurrency: num(a.concurrency, d.concurrency),
  annotators: num(a.annotators, d.annotators),
  rates: {
    reject: num(a.reject, MIXED_RATES.reject),
    billingFail: num(a['billing-fail'], MIXED_RATES.billingFail),
    qaTimeout: num(a['qa-timeout'], MIXED_RATES.qaTimeout),
    cancel: num(a.cancel, MIXED_RATES.cancel),
  },
  qaSlaMs: num(a['qa-sla-ms'], d.qaSlaMs),
  killsPerService: num(a['kills-per-service'], d.killsPerService),
  pgDrops: num(a['pg-drops'], d.pgDrops),
  redisOutageMs: num(a['redis-outage-s'], d.redisOutageMs / 1000) * 1000,
  pauseMs: num(a['pause-s'], d.pauseMs / 1000) * 1000,
  maxRunMs: num(a['max-minutes'], d.maxRunMs / 60_000) * 60_000,
  quiesceMs: num(a['quiesce-s'], d.quiesceMs / 1000) * 1000,
  recoveryMs: num(a['recovery-s'], d.recoveryMs / 1000) * 1000,
  window: a['fault-window'] ? [Number(a['fault-window'].split('-')[0]), Number(a['fault-window'].split('-')[1])] : d.window,
  logDir: resolve(a['log-dir'] ?? join(repoRoot, '.local/chaos', `${stamp}-seed${Number.isFinite(seed) ? seed : 'x'}`)),
};
const problems = validateOptions(options);
if (problems.length > 0) {
  console.error(`chaos: bad options:\n  ${problems.join('\n  ')}\n${usage}`);
  process.exit(2);
}

const t0 = Date.now();
const say = (line: string) => process.stderr.write(`${line.split('\n').map((l) => `[chaos +${((Date.now() - t0) / 1000).toFixed(1).padStart(6)}s] ${l}`).join('\n')}\n`);

const controller = new AbortController();
let signals = 0;
const onSignal = (name: NodeJS.Signals) => {
  signals++;
  if (signals === 1) {
    say(`${name}: stopping; removing everything this run started (${name} again to exit at once, leaving it behind)`);
    controller.abort(name);
    return;
  }
  process.exit(130);
};
process.on('SIGINT', onSignal);
process.on('SIGTERM', onSignal);
// The whole run is bounded: at the limit it aborts (and cleans up); if even that hangs, it exits.
const bound = setTimeout(() => {
  say(`time bound of ${options.maxRunMs / 60_000} min reached: aborting`);
  controller.abort(`the time bound of ${options.maxRunMs / 60_000} min was reached`);
  setTimeout(() => process.exit(2), 420_000).unref();
}, options.maxRunMs);
bound.unref();

mkdirSync(options.logDir, { recursive: true });
say(`chaos run: ${options.tasks} tasks, duplicates ${options.duplicates}, seed ${options.seed}; logs in ${options.logDir}`);
runChaos(options, { say, signal: controller.signal, build: !a['no-build'] }).then(
  (result) => {
    clearTimeout(bound);
    const report = formatChaosReport(result);
    const v = verdict(result);
    writeFileSync(join(options.logDir, 'report.md'), `${report}\n`);
    writeFileSync(join(options.logDir, 'result.json'), `${JSON.stringify({ ...result, verdict: v }, null, 2)}\n`);
    if (a['json-out']) writeFileSync(resolve(a['json-out']), `${JSON.stringify({ ...result, verdict: v }, null, 2)}\n`);
    console.log(`\n${report}`);
    say(v.pass ? 'PASS' : `FAIL (exit ${v.exitCode}): ${v.reasons.join('; ')}`);
    process.exit(signals > 0 ? 130 : v.exitCode);
  },
  (error: Error) => {
    console.error(`chaos failed: ${error.stack ?? error.message}`);
    process.exit(2);
  },
);
