// npm run produce -- --tasks 1000 --reject 0.2 --billing-fail 0.05 --qa-timeout 0.05 --cancel 0.02 --duplicates 0.3
// npm run produce -- --import 200000 --repeat 0.2 --bad 0.01 [--reupload] [--prelabels 0.5 --duplicates 0.2]
// Drives tasks through the saga over HTTP with simulated annotators, reviewers and admins, or
// uploads a generated NDJSON file to the bulk import endpoint; shows progress, summarises, then
// runs the invariant auditor.
import { formatReport, type AuditReport } from '@labelflow/auditor';
import { DEV_AUDIENCE, DEV_ISSUER, devKeyFile } from '@labelflow/auth';
import { auditRun } from './audit';
import { adminOf, castFor, devSigner } from './identity';
import { IMPORT_MANAGER, runImport, type ImportRunSummary } from './import-run';
import { parseProduceArgs, ProduceMode, usage, UsageError, type ProduceOptions } from './options';
import { runPrelabels } from './prelabels';
import { runProduction } from './run';

/** One line per tenth of the run when piped, a redrawn bar on a terminal. */
function progressBar(t0: number, unit: string) {
  return (done: number, total: number) => {
    const elapsed = `${((Date.now() - t0) / 1000).toFixed(1)}s`;
    if (!process.stderr.isTTY) {
      if (done === total || Math.floor((done * 10) / total) > Math.floor(((done - 1) * 10) / total)) process.stderr.write(`${done}/${total} ${unit}  ${elapsed}\n`);
      return;
    }
    const width = 30;
    const filled = Math.round((Math.min(done, total) / total) * width);
    process.stderr.write(`\r[${'#'.repeat(filled)}${'.'.repeat(width - filled)}] ${done}/${total} ${unit}  ${elapsed}${done === total ? '\n' : ''}`);
  };
}

async function audit(o: ProduceOptions): Promise<AuditReport> {
  return auditRun({
    pgUrl: o.pgUrl,
    dbSuffix: o.dbSuffix,
    kafkaBrokers: o.kafkaBrokers,
    kafkaSecurity: o.kafkaSecurity,
    prefix: o.prefix,
    env: process.env,
    onPoolError: (db, e) => console.error(`note: a connection to ${db} failed during the audit: ${e.message}`),
  });
}

async function sagas(o: ProduceOptions): Promise<boolean> {
  if (o.rates.qaTimeout > 0) console.error('note: --qa-timeout waits for review deadlines; start the stack with a short SLA, e.g. QA_SLA_MS=3000 npm start');
  const summary = await runProduction({
    urls: o.urls,
    tasks: o.tasks,
    concurrency: o.concurrency,
    annotators: o.annotators,
    reviewers: o.reviewers,
    managers: o.managers,
    signer: await devSigner({ keyFile: o.signingKeyFile, issuer: o.issuer, audience: o.audience }),
    price: o.price,
    rates: o.rates,
    duplicates: o.duplicates,
    kafka: { brokers: o.kafkaBrokers, topicPrefix: o.prefix, security: o.kafkaSecurity },
    timeoutMs: o.timeoutMs,
    waitS: o.waitS,
    seed: o.seed,
    onProgress: progressBar(Date.now(), 'tasks done'),
  });
  const table = (x: Readonly<Record<string, number>>) => Object.entries(x).map(([k, v]) => `${k} ${v}`).join(', ');
  console.log(`\nsummary
  tasks        ${summary.tasks} in ${(summary.durationMs / 1000).toFixed(1)} s
  scenarios    ${table(summary.byScenario)}
  outcomes     ${table(summary.byOutcome)}
  unexpected   ${summary.unexpected.length}
  saga p50     ${summary.latencyMs.p50} ms
  saga p99     ${summary.latencyMs.p99} ms
  duplicated   ${summary.duplicated} Kafka messages delivered twice
  http/step    ${summary.requestsPerStep.toFixed(2)} (${Object.entries(summary.byStep).map(([step, t]) => `${step} ${(t.requests / t.steps).toFixed(2)}`).join(', ')})
  rate-limited ${summary.rateLimited} answers 429, waited out (included in http/step)
  unavailable  ${summary.unavailable} answers 503, sent again (a service's dependency was away)
  users        ${summary.cast.admin} (platform admin), ${summary.cast.managers} managers, ${summary.cast.annotators} annotators, ${summary.cast.reviewers} reviewers`);
  for (const u of summary.unexpected.slice(0, 10)) console.log(`  unexpected: ${u.scenario} ended ${u.outcome}${u.taskId ? ` (task ${u.taskId})` : ''}${u.error ? `: ${u.error}` : ''}`);
  return summary.unexpected.length === 0;
}

function printImport(run: ImportRunSummary): void {
  const { plan } = run;
  console.log(`\nimport summary (project ${run.projectId}, as ${run.manager})
  file         ${plan.lines} lines: ${plan.distinct} distinct valid, ${plan.repeats} repeated, ${plan.bad} bad`);
  for (const u of run.uploads) {
    const s = u.summary;
    const rate = s.lines / Math.max(0.001, u.ms / 1000);
    console.log(`  ${u.kind === 'first' ? 'upload ' : 're-upload'}    import ${u.importId}: ${s.status}, lines ${s.lines}, created ${s.created}, already present ${s.alreadyPresent}, rejected ${s.rejected} ` +
      `(${s.errors.length} errors listed) in ${(u.ms / 1000).toFixed(1)} s, ${Math.round(rate)} lines/s${u.resumed > 0 ? `, resumed ${u.resumed}x after a dropped connection` : ''}`);
    for (const e of s.errors.slice(0, 3)) console.log(`      line ${e.line}: ${e.code} ${e.message}`);
    console.log(`      check: ${u.problems.length === 0 ? 'matches the file' : `MISMATCH\n        ${u.problems.slice(0, 20).join('\n        ')}`}`);
  }
}

async function imports(o: ProduceOptions): Promise<boolean> {
  const spec = o.import;
  if (!spec) throw new UsageError('--import N is missing');
  const t0 = Date.now();
  const bar = progressBar(t0, 'lines imported');
  const signer = await devSigner({ keyFile: o.signingKeyFile, issuer: o.issuer, audience: o.audience });
  const run = await runImport({
    urls: o.urls,
    signer,
    lines: spec.lines,
    repeat: spec.repeat,
    bad: spec.bad,
    reupload: spec.reupload,
    seed: o.seed,
    price: o.price,
    onProgress: (p) => bar(p.lines, spec.lines),
    onNote: (note) => console.error(`note: ${note}`),
  });
  printImport(run);
  if (o.prelabels === 0) return run.ok;
  const cast = castFor(signer, adminOf(signer), [run.projectId], { annotators: o.annotators, managers: 1 });
  const p = await runPrelabels({
    urls: o.urls,
    kafka: { brokers: o.kafkaBrokers, topicPrefix: o.prefix, security: o.kafkaSecurity },
    projectId: run.projectId,
    manager: signer.actor({ subject: IMPORT_MANAGER, projects: { [run.projectId]: 'manager' } }),
    annotators: cast.annotators,
    share: o.prelabels,
    duplicates: o.duplicates,
    seed: o.seed,
    timeoutMs: o.timeoutMs,
    concurrency: o.concurrency,
    onProgress: progressBar(Date.now(), 'proposals listed by label-svc'),
  });
  console.log(`\npre-label summary
  proposals    ${p.proposals} for ${p.tasks} of ${run.plan.distinct} tasks (model produce-model@1), ${p.duplicatesSent} sent twice, on ${o.prefix}.prelabels
  stored       ${p.stored} listed once each by label-svc (GET /tasks/:taskId/prelabels) after the tasks were claimed, in ${(p.ms / 1000).toFixed(1)} s
  check        ${p.problems.length === 0 ? 'every proposal listed exactly once' : `MISMATCH\n    ${p.problems.slice(0, 20).join('\n    ')}${p.problems.length > 20 ? `\n    … ${p.problems.length - 20} more` : ''}`}`);
  return run.ok && p.problems.length === 0 && p.stored === p.tasks;
}

async function main(): Promise<number> {
  let parsed;
  try {
    parsed = parseProduceArgs(process.argv.slice(2), process.env, { signingKeyFile: devKeyFile(), issuer: DEV_ISSUER, audience: DEV_AUDIENCE });
  } catch (error) {
    if (!(error instanceof UsageError)) throw error;
    console.error(`produce: ${error.message}`);
    return 2;
  }
  if (parsed.help) {
    console.log(usage);
    return 0;
  }
  const o = parsed.options;
  const ok = o.mode === ProduceMode.import ? await imports(o) : await sagas(o);
  if (!o.audit) return ok ? 0 : 1;
  const report = await audit(o);
  console.log(`\n${formatReport(report)}`);
  return ok && report.ok ? 0 : 1;
}

main().then(
  (code) => process.exit(code),
  (error: Error) => {
    console.error(`produce failed: ${error.message}`);
    process.exit(2);
  },
);
