import { listDeadLetters as readDeadLetters } from '@labelflow/dlq';
import { Kafka, logLevel } from 'kafkajs';
import { kafkajsSecurity, type KafkaSecurity } from '@labelflow/messaging';
import { checkInvariants, type AuditOptions } from './invariants';
import type { AuditReport, DeadLetter } from './report';
import { takeSnapshot, type Sources } from './snapshot';

export * from './invariants';
export * from './report';
export * from './snapshot';
export * from './pools';

export interface AuditRun extends Partial<AuditOptions> {
  readonly sources: Sources;
  /** Dead-letter topics to list (they are reported, not counted as violations). */
  readonly deadLetterTopics?: readonly string[];
  readonly kafkaBrokers?: readonly string[];
  /** The brokers' login (`kafkaSecurityFromEnv`): the compose broker takes only SCRAM. */
  readonly kafkaSecurity?: KafkaSecurity;
}

/**
 * The dead-letter topics an audit lists: the four services' and the saga monitor's (an event it
 * could not record is missing from a timeline). One list for the CLI, the producer, chaos and the
 * tests, so none of them looks at fewer.
 */
export const deadLetterTopicsOf = (prefix: string): string[] => ['task-svc', 'label-svc', 'qa-svc', 'billing-svc', 'saga-monitor'].map((service) => `${prefix}.${service}.dlq`);

/** Runs the audit: one snapshot, every invariant, the dead letters listed. */
export async function runAudit(run: AuditRun): Promise<AuditReport> {
  const now = run.now ?? new Date();
  const snapshot = await takeSnapshot(run.sources);
  const violations = checkInvariants(snapshot, { now, settleMs: run.settleMs ?? 30_000, stuckMs: run.stuckMs ?? 60_000, outboxMs: run.outboxMs ?? 60_000 });
  const deadLetters = run.kafkaBrokers && run.deadLetterTopics?.length ? await listDeadLetters(run.kafkaBrokers, run.deadLetterTopics, run.kafkaSecurity) : [];
  const byStatus: Record<string, number> = {};
  for (const t of snapshot.tasks) byStatus[t.status] = (byStatus[t.status] ?? 0) + 1;
  return {
    checkedAt: now.toISOString(),
    counts: { tasks: snapshot.tasks.length, projects: snapshot.projects.length, byStatus },
    violations,
    deadLetters,
    ok: violations.length === 0,
  };
}

/** Reads dead-letter topics up to their current end with a throwaway group (nothing is committed). */
async function listDeadLetters(brokers: readonly string[], topics: readonly string[], security?: KafkaSecurity): Promise<DeadLetter[]> {
  const kafka = new Kafka({ clientId: 'labelflow-auditor', brokers: [...brokers], ...kafkajsSecurity(security), logLevel: logLevel.NOTHING });
  const admin = kafka.admin();
  await admin.connect();
  const existing = new Set(await admin.listTopics().finally(() => admin.disconnect()));
  const found: DeadLetter[] = [];
  for (const topic of topics.filter((t) => existing.has(t))) {
    for (const l of await readDeadLetters(kafka, topic)) {
      found.push({ topic, partition: l.partition, offset: l.offset, code: l.code, message: l.reason, source: l.source ? `${l.source.topic}/${l.source.partition}@${l.source.offset}` : '' });
    }
  }
  return found;
}
