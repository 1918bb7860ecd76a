import pg from 'pg';
import { expect } from 'vitest';
import { deadLetterTopicsOf, formatReport, runAudit, type AuditReport } from '@labelflow/auditor';
import { serviceNames, type TestStack } from '@labelflow/testing';

/** Runs the invariant auditor over a test stack's databases and dead-letter topics. */
export async function auditStack(stack: TestStack, kafkaBrokers: string, options: { settleMs?: number; stuckMs?: number } = {}): Promise<AuditReport> {
  const pools = serviceNames.map((name) => new pg.Pool({ connectionString: stack.databases[name], max: 2 }));
  try {
    const [task, label, qa, billing] = pools as [pg.Pool, pg.Pool, pg.Pool, pg.Pool];
    return await runAudit({
      sources: { task, label, qa, billing },
      settleMs: options.settleMs ?? 0,
      stuckMs: options.stuckMs ?? 60_000,
      outboxMs: 60_000,
      kafkaBrokers: kafkaBrokers.split(','),
      deadLetterTopics: deadLetterTopicsOf(stack.prefix),
    });
  } finally {
    await Promise.all(pools.map((p) => p.end()));
  }
}

/** After a scenario has settled: every cross-service invariant holds. */
export async function expectAuditClean(stack: TestStack, kafkaBrokers: string): Promise<void> {
  await stack.quiesce();
  const report = await auditStack(stack, kafkaBrokers);
  expect(report.violations, formatReport(report)).toEqual([]);
}
