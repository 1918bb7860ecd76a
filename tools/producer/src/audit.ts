// The invariant audit every produce run ends with, over the four services' databases.
import type pg from 'pg';
import { deadLetterTopicsOf, guardedPool, runAudit, type AuditReport } from '@labelflow/auditor';
import type { KafkaSecurity } from '@labelflow/messaging';

export interface AuditTarget {
  readonly pgUrl: string;
  readonly dbSuffix: string;
  readonly kafkaBrokers: readonly string[];
  readonly kafkaSecurity?: KafkaSecurity;
  readonly prefix: string;
  readonly env: Readonly<Record<string, string | undefined>>;
  /** Told of a database connection that failed (the audit goes on with another, or fails); default: ignored. */
  readonly onPoolError?: (database: string, error: Error) => void;
}

/** Audits until it holds or 60 s have passed: in-flight work settles within seconds; a real violation is still there after the wait. */
export async function auditRun(t: AuditTarget): Promise<AuditReport> {
  const services = ['task_svc', 'label_svc', 'qa_svc', 'billing_svc'];
  // As the auditor's CLI: TASK_SVC_DATABASE_URL ... override each database.
  const dbUrl = (db: string) => t.env[`${db.toUpperCase()}_DATABASE_URL`] ?? `${t.pgUrl}/${db}${t.dbSuffix}`;
  // A connection the server ends during the audit must not crash the run as an uncaught error.
  const pools = services.map((db) => guardedPool({ connectionString: dbUrl(db), max: 2 }, (e) => t.onPoolError?.(db, e)));
  const [task, label, qa, billing] = pools as [pg.Pool, pg.Pool, pg.Pool, pg.Pool];
  try {
    let report: AuditReport | undefined;
    for (const until = Date.now() + 60_000; ; await new Promise((r) => setTimeout(r, 1_000))) {
      report = await runAudit({
        sources: { task, label, qa, billing },
        settleMs: 0,
        kafkaBrokers: [...t.kafkaBrokers],
        ...(t.kafkaSecurity ? { kafkaSecurity: t.kafkaSecurity } : {}),
        deadLetterTopics: deadLetterTopicsOf(t.prefix),
      });
      if (report.ok || Date.now() > until) return report;
    }
  } finally {
    await Promise.all(pools.map((p) => p.end()));
  }
}
