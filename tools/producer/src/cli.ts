// npm run produce -- --tasks 1000 --reject 0.2 --billing-fail 0.05 --qa-timeout 0.05 --cancel 0.02 --duplicates 0.3
// Drives tasks through the saga over HTTP with simulated annotators, reviewers and admins, shows
// progress, summarises outcomes and saga latency, then runs the invariant auditor.
import { parseArgs } from 'node:util';
import pg from 'pg';
import { formatReport, runAudit, type AuditReport } from '@labelflow/auditor';
import { DEV_AUDIENCE, DEV_ISSUER, devKeyFile } from '@labelflow/auth';
import { devSigner } from './identity';
import { runProduction } from './run';

const { values: a } = parseArgs({
  options: {
    tasks: { type: 'string', default: '50' },
    concurrency: { type: 'string', default: '16' },
    annotators: { type: 'string', default: '8' },
    reviewers: { type: 'string', default: '3' },
    managers: { type: 'string', default: '4' },
    price: { type: 'string', default: '150' },
    reject: { type: 'string', default: '0' },
    'billing-fail': { type: 'string', default: '0' },
    'qa-timeout': { type: 'string', default: '0' },
    cancel: { type: 'string', default: '0' },
    duplicates: { type: 'string', default: '0' },
    seed: { type: 'string', default: '42' },
    'timeout-s': { type: 'string', default: '300' },
    'wait-s': { type: 'string', default: '10' },
    'kafka-brokers': { type: 'string', default: process.env.KAFKA_BROKERS ?? '127.0.0.1:9092' },
    prefix: { type: 'string', default: process.env.KAFKA_TOPIC_PREFIX ?? 'labelflow' },
    'pg-url': { type: 'string', default: process.env.PG_URL ?? 'postgres://postgres@127.0.0.1:5432' },
    // A second stack's databases (scripts/start.sh's LABELFLOW_DB_SUFFIX): task_svc<suffix> ...
    'db-suffix': { type: 'string', default: process.env.LABELFLOW_DB_SUFFIX ?? '' },
    'no-audit': { type: 'boolean', default: false },
    'task-url': { type: 'string', default: process.env.TASK_SVC_URL ?? 'http://127.0.0.1:3001' },
    'label-url': { type: 'string', default: process.env.LABEL_SVC_URL ?? 'http://127.0.0.1:3002' },
    'qa-url': { type: 'string', default: process.env.QA_SVC_URL ?? 'http://127.0.0.1:3003' },
    'billing-url': { type: 'string', default: process.env.BILLING_SVC_URL ?? 'http://127.0.0.1:3004' },
    // The simulated users' tokens: signed with this key, for this issuer and audience (what the services verify).
    'signing-key-file': { type: 'string', default: devKeyFile() },
    issuer: { type: 'string', default: process.env.AUTH_ISSUER || DEV_ISSUER },
    audience: { type: 'string', default: process.env.AUTH_AUDIENCE || DEV_AUDIENCE },
    help: { type: 'boolean', default: false },
  },
});

const fail = (message: string): never => {
  console.error(message);
  process.exit(2);
};
if (a.help) {
  console.log(
    'usage: npm run produce -- [--tasks N] [--concurrency C] [--annotators A] [--reviewers V] [--managers M] [--price P] [--reject R] [--billing-fail R] [--qa-timeout R] [--cancel R]\n' +
      '                          [--duplicates R] [--seed S] [--timeout-s T] [--wait-s W] [--no-audit] [--task-url U] [--label-url U] [--qa-url U] [--billing-url U]\n' +
      '                          [--kafka-brokers B] [--prefix P] [--pg-url U] [--db-suffix S] [--signing-key-file F] [--issuer I] [--audience A]\n' +
      'Tokens are signed with the local development key (--signing-key-file, default $LABELFLOW_SIGNING_KEY_FILE or .local/auth/dev-signing-key.json), the one npm start configures the services with.',
  );
  process.exit(0);
}
const int = (name: 'tasks' | 'concurrency' | 'annotators' | 'reviewers' | 'managers' | 'price' | 'seed' | 'timeout-s' | 'wait-s', min: number, max = Number.MAX_SAFE_INTEGER) => {
  const n = Number(a[name]);
  if (Number.isInteger(n) && n >= min && n <= max) return n;
  return fail(`--${name} must be an integer ${max === Number.MAX_SAFE_INTEGER ? `>= ${min}` : `from ${min} to ${max}`}, got ${a[name]}`);
};
const rate = (name: 'reject' | 'billing-fail' | 'qa-timeout' | 'cancel' | 'duplicates') => {
  const n = Number(a[name]);
  return Number.isFinite(n) && n >= 0 && n <= 1 ? n : fail(`--${name} must be a fraction between 0 and 1, got ${a[name]}`);
};
const rates = { reject: rate('reject'), billingFail: rate('billing-fail'), qaTimeout: rate('qa-timeout'), cancel: rate('cancel') };
if (rates.reject + rates.billingFail + rates.qaTimeout + rates.cancel > 1) fail('the scenario rates add up to more than 1');
if (rates.qaTimeout > 0) console.error('note: --qa-timeout waits for review deadlines; start the stack with a short SLA, e.g. QA_SLA_MS=3000 npm start');

async function audit(): Promise<AuditReport> {
  const services = ['task_svc', 'label_svc', 'qa_svc', 'billing_svc'];
  // As the auditor's CLI: TASK_SVC_DATABASE_URL ... override each database.
  const dbUrl = (db: string) => process.env[`${db.toUpperCase()}_DATABASE_URL`] ?? `${a['pg-url']}/${db}${a['db-suffix'] ?? ''}`;
  const pools = services.map((db) => new pg.Pool({ connectionString: dbUrl(db), max: 2 }));
  const [task, label, qa, billing] = pools as [pg.Pool, pg.Pool, pg.Pool, pg.Pool];
  try {
    // In-flight work settles within seconds; a real violation is still there after the wait.
    let report: AuditReport | undefined;
    for (const until = Date.now() + 60_000; ; await new Promise((r) => setTimeout(r, 1_000))) {
      report = await runAudit({
        sources: { task, label, qa, billing },
        settleMs: 0,
        kafkaBrokers: (a['kafka-brokers'] ?? '').split(','),
        deadLetterTopics: ['task-svc', 'label-svc', 'qa-svc', 'billing-svc'].map((s) => `${a.prefix}.${s}.dlq`),
      });
      if (report.ok || Date.now() > until) return report;
    }
  } finally {
    await Promise.all(pools.map((p) => p.end()));
  }
}

async function main(): Promise<number> {
  const tasks = int('tasks', 1);
  const t0 = Date.now();
  const summary = await runProduction({
    urls: { task: a['task-url'] ?? '', label: a['label-url'] ?? '', qa: a['qa-url'] ?? '', billing: a['billing-url'] ?? '' },
    tasks,
    concurrency: int('concurrency', 1),
    annotators: int('annotators', 1),
    reviewers: int('reviewers', 1),
    managers: int('managers', 1),
    signer: await devSigner({ keyFile: a['signing-key-file'] ?? devKeyFile(), issuer: a.issuer ?? DEV_ISSUER, audience: a.audience ?? DEV_AUDIENCE }),
    price: int('price', 1),
    rates,
    duplicates: rate('duplicates'),
    kafka: { brokers: (a['kafka-brokers'] ?? '').split(','), topicPrefix: a.prefix ?? 'labelflow' },
    timeoutMs: int('timeout-s', 1) * 1000,
    // The services honour at most 30 s (MAX_PREFER_WAIT_S).
    waitS: int('wait-s', 0, 30),
    seed: int('seed', 0),
    onProgress: (done, total) => {
      const elapsed = `${((Date.now() - t0) / 1000).toFixed(1)}s`;
      // A redrawn bar only on a terminal; piped into a log, one line per tenth of the run.
      if (!process.stderr.isTTY) {
        if (done === total || Math.floor((done * 10) / total) > Math.floor(((done - 1) * 10) / total)) process.stderr.write(`${done}/${total} tasks done  ${elapsed}\n`);
        return;
      }
      const width = 30;
      const filled = Math.round((done / total) * width);
      process.stderr.write(`\r[${'#'.repeat(filled)}${'.'.repeat(width - filled)}] ${done}/${total}  ${elapsed}${done === total ? '\n' : ''}`);
    },
  });
  const table = (o: Readonly<Record<string, number>>) => Object.entries(o).map(([k, v]) => `${k} ${v}`).join(', ');
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
  users        ${summary.cast.admin} (platform admin), ${summary.cast.managers} managers, ${summary.cast.annotators} annotators, ${summary.cast.reviewers} reviewers`);
  for (const u of summary.unexpected.slice(0, 10)) console.log(`  unexpected: ${u.scenario} ended ${u.outcome}${u.taskId ? ` (task ${u.taskId})` : ''}${u.error ? `: ${u.error}` : ''}`);
  if (a['no-audit']) return summary.unexpected.length === 0 ? 0 : 1;
  const report = await audit();
  console.log(`\n${formatReport(report)}`);
  return summary.unexpected.length === 0 && report.ok ? 0 : 1;
}

main().then(
  (code) => process.exit(code),
  (error: Error) => {
    console.error(`produce failed: ${error.message}`);
    process.exit(2);
  },
);
