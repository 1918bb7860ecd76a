// npm run audit -- [--json] [--prefix labelflow] [--db-suffix S] [--settle-ms 30000] [--stuck-ms 60000] [--outbox-ms 60000]
// Reads the four service databases (PG_URL + task_svc/label_svc/qa_svc/billing_svc plus the suffix of
// a second stack, LABELFLOW_DB_SUFFIX, or TASK_SVC_DATABASE_URL ... to override each) and the
// dead-letter topics (KAFKA_BROKERS, with the services' KAFKA_SASL_* / KAFKA_SSL login), prints the
// report, and exits 1 on any violation, 2 when it cannot run.
import type pg from 'pg';
import { AuditUsageError, auditUsage, parseAuditArgs, type AuditArgs } from './args';
import { deadLetterTopicsOf, formatReport, runAudit } from './index';
import { guardedPool } from './pools';

/** The options, or exit 2 with the usage: a typo is "could not run", never "a violation". */
function readArgs(): AuditArgs {
  try {
    const parsed = parseAuditArgs(process.argv.slice(2), process.env);
    if (!parsed.help) return parsed.args;
    console.log(auditUsage);
    process.exit(0);
  } catch (error) {
    if (!(error instanceof AuditUsageError)) throw error;
    console.error(`${error.message}\n${auditUsage}`);
    process.exit(2);
  }
}
const args = readArgs();

const dbUrl = (svc: string) => process.env[`${svc.toUpperCase().replace('-', '_')}_DATABASE_URL`] ?? `${args.pgUrl}/${svc.replace('-', '_')}${args.dbSuffix}`;
const services = ['task-svc', 'label-svc', 'qa-svc', 'billing-svc'] as const;

async function main(): Promise<number> {
  // A connection the server ends while the audit runs fails the query on it (exit 2 below) or is
  // replaced by the pool; said on stderr, never an uncaught error (which would exit 1).
  const pools = Object.fromEntries(
    services.map((s) => [s, guardedPool({ connectionString: dbUrl(s), max: 2 }, (e) => console.error(`note: a connection to the ${s} database failed: ${e.message}`))]),
  ) as Record<(typeof services)[number], pg.Pool>;
  try {
    const report = await runAudit({
      sources: { task: pools['task-svc'], label: pools['label-svc'], qa: pools['qa-svc'], billing: pools['billing-svc'] },
      settleMs: args.settleMs,
      stuckMs: args.stuckMs,
      outboxMs: args.outboxMs,
      ...(args.kafka ? { kafkaBrokers: args.kafka.brokers, kafkaSecurity: args.kafka.security, deadLetterTopics: deadLetterTopicsOf(args.prefix) } : {}),
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
