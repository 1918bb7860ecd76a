// npm run audit -- [--json] [--prefix labelflow] [--db-suffix S] [--settle-ms 30000] [--stuck-ms 60000] [--outbox-ms 60000]
// Reads the four service databases (PG_URL + task_svc/label_svc/qa_svc/billing_svc plus the suffix of
// a second stack, LABELFLOW_DB_SUFFIX, or TASK_SVC_DATABASE_URL ... to override each) and the
// dead-letter topics (KAFKA_BROKERS, with the services' KAFKA_SASL_* / KAFKA_SSL login), prints the
// report, and exits 1 on any violation, 2 when it cannot run.
import { parseArgs } from 'node:util';
import pg from 'pg';
import { kafkaSecurityFromEnv } from '@labelflow/messaging';
import { deadLetterTopicsOf, formatReport, runAudit } from './index';

const usage = `usage: npm run audit -- [--json] [--prefix P] [--db-suffix S] [--pg-url URL] [--kafka-brokers B] [--no-kafka]
  [--settle-ms 30000] [--stuck-ms 60000] [--outbox-ms 60000]
exit 0: OK, 1: a violation, 2: could not run. See tools/auditor/README.md.`;

const options = {
  json: { type: 'boolean', default: false },
  help: { type: 'boolean', default: false },
  prefix: { type: 'string', default: process.env.KAFKA_TOPIC_PREFIX ?? 'labelflow' },
  'db-suffix': { type: 'string', default: process.env.LABELFLOW_DB_SUFFIX ?? '' },
  'pg-url': { type: 'string', default: process.env.PG_URL ?? 'postgres://postgres@127.0.0.1:5432' },
  'kafka-brokers': { type: 'string', default: process.env.KAFKA_BROKERS ?? '127.0.0.1:9092' },
  'settle-ms': { type: 'string', default: '30000' },
  'stuck-ms': { type: 'string', default: '60000' },
  'outbox-ms': { type: 'string', default: '60000' },
  'no-kafka': { type: 'boolean', default: false },
} as const;

/** The options, or exit 2 with the usage: a typo is "could not run", never "a violation". */
function readArgs() {
  try {
    return parseArgs({ options }).values;
  } catch (error) {
    console.error(`${(error as Error).message}\n${usage}`);
    process.exit(2);
  }
}
const args = readArgs();
if (args.help) {
  console.log(usage);
  process.exit(0);
}

const ms = (name: 'settle-ms' | 'stuck-ms' | 'outbox-ms') => {
  const n = Number(args[name]);
  if (!Number.isInteger(n) || n < 0) {
    console.error(`--${name} must be a non-negative integer, got ${args[name]}`);
    process.exit(2);
  }
  return n;
};
/** The brokers' login as the services read it; a partial one is "could not run". */
const kafkaSecurity = () => {
  try {
    return kafkaSecurityFromEnv(process.env);
  } catch (error) {
    console.error((error as Error).message);
    process.exit(2);
  }
};
const dbUrl = (svc: string) => process.env[`${svc.toUpperCase().replace('-', '_')}_DATABASE_URL`] ?? `${args['pg-url']}/${svc.replace('-', '_')}${args['db-suffix']}`;
const services = ['task-svc', 'label-svc', 'qa-svc', 'billing-svc'] as const;

async function main(): Promise<number> {
  const pools = Object.fromEntries(services.map((s) => [s, new pg.Pool({ connectionString: dbUrl(s), max: 2 })])) as Record<(typeof services)[number], pg.Pool>;
  try {
    const report = await runAudit({
      sources: { task: pools['task-svc'], label: pools['label-svc'], qa: pools['qa-svc'], billing: pools['billing-svc'] },
      settleMs: ms('settle-ms'),
      stuckMs: ms('stuck-ms'),
      outboxMs: ms('outbox-ms'),
      ...(args['no-kafka'] ? {} : { kafkaBrokers: (args['kafka-brokers'] ?? '').split(','), kafkaSecurity: kafkaSecurity(), deadLetterTopics: deadLetterTopicsOf(args.prefix) }),
    });
    console.log(args.json ? JSON.stringify(report, null, 2) : formatReport(report));
    // Nothing to check passes every check: say so, in case these are not the databases meant.
    if (report.counts.tasks === 0) console.error(`note: no tasks in ${dbUrl('task-svc')}: nothing was checked (another stack? --db-suffix, --pg-url)`);
    return report.ok ? 0 : 1;
  } finally {
    await Promise.all(Object.values(pools).map((p) => p.end()));
  }
}

main().then(
  (code) => process.exit(code),
  (error: Error) => {
    console.error(`audit could not run: ${error.message}`);
    process.exit(2);
  },
);
