// npm run chaos -- --tasks 1000 --duplicates 0.3
// Runs the producer's mixed scenarios against a private stack (its own Kafka, PostgreSQL, Redis and
// the four built services) while injecting a seeded schedule of faults, then quiesces, audits and
// looks for lost events. Prints a markdown report; exit 0 only if nothing was violated, unexpected or lost.
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { repoRoot } from '@labelflow/testing';
import { chaosUsage, parseChaosArgs, type ChaosOptions } from './options';
import { formatChaosReport, verdict } from './report';
import { runChaos } from './run';

/** The options, or exit 2 with every problem and the usage. */
function readArgs(): { readonly options: ChaosOptions; readonly build: boolean; readonly jsonOut?: string } {
  const parsed = parseChaosArgs(process.argv.slice(2), { repoRoot, stamp: new Date().toISOString().replace(/[:.]/g, '-') });
  if (parsed.help) {
    console.log(chaosUsage);
    process.exit(0);
  }
  if (!('options' in parsed)) {
    console.error(`chaos: bad options:\n  ${parsed.problems.join('\n  ')}\n${chaosUsage}`);
    process.exit(2);
  }
  return parsed;
}
const { options, build, jsonOut } = readArgs();

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
runChaos(options, { say, signal: controller.signal, build }).then(
  (result) => {
    clearTimeout(bound);
    const report = formatChaosReport(result);
    const v = verdict(result);
    writeFileSync(join(options.logDir, 'report.md'), `${report}\n`);
    writeFileSync(join(options.logDir, 'result.json'), `${JSON.stringify({ ...result, verdict: v }, null, 2)}\n`);
    if (jsonOut) writeFileSync(jsonOut, `${JSON.stringify({ ...result, verdict: v }, null, 2)}\n`);
    console.log(`\n${report}`);
    say(v.pass ? 'PASS' : `FAIL (exit ${v.exitCode}): ${v.reasons.join('; ')}`);
    process.exit(signals > 0 ? 130 : v.exitCode);
  },
  (error: Error) => {
    console.error(`chaos failed: ${error.stack ?? error.message}`);
    process.exit(2);
  },
);
