import { Kafka, logLevel } from 'kafkajs';
import { checkInvariants, type AuditOptions } from './invariants';
import type { AuditReport, DeadLetter } from './report';
import { takeSnapshot, type Sources } from './snapshot';

export * from './invariants';
export * from './report';
export * from './snapshot';

export interface AuditRun extends Partial<AuditOptions> {
  readonly sources: Sources;
  /** Dead-letter topics to list (they are reported, not counted as violations). */
  readonly deadLetterTopics?: readonly string[];
  readonly kafkaBrokers?: readonly string[];
}

/** Runs the audit: one snapshot, every invariant, the dead letters listed. */
export async function runAudit(run: AuditRun): Promise<AuditReport> {
  const now = run.now ?? new Date();
  const snapshot = await takeSnapshot(run.sources);
  const violations = checkInvariants(snapshot, { now, settleMs: run.settleMs ?? 30_000, stuckMs: run.stuckMs ?? 60_000, outboxMs: run.outboxMs ?? 60_000 });
  const deadLetters = run.kafkaBrokers && run.deadLetterTopics?.length ? await listDeadLetters(run.kafkaBrokers, run.deadLetterTopics) : [];
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
async function listDeadLetters(brokers: readonly string[], topics: readonly string[]): Promise<DeadLetter[]> {
  const kafka = new Kafka({ clientId: 'labelflow-auditor', brokers: [...brokers], logLevel: logLevel.NOTHING });
  const admin = kafka.admin();
  await admin.connect();
  const existing = new Set(await admin.listTopics());
  const present = topics.filter((t) => existing.has(t));
  const ends = new Map<string, number>();
  // Retention may have deleted the oldest dead letters: what is there runs from low to high.
  for (const topic of present) for (const p of await admin.fetchTopicOffsets(topic)) ends.set(`${topic}/${p.partition}`, Number(p.high) - Number(p.low));
  await admin.disconnect();
  const total = [...ends.values()].reduce((a, b) => a + b, 0);
  if (total === 0) return [];
  const found: DeadLetter[] = [];
  const consumer = kafka.consumer({ groupId: `labelflow-auditor-${Date.now()}-${Math.random().toString(36).slice(2)}` });
  await consumer.connect();
  try {
    for (const topic of present) await consumer.subscribe({ topic, fromBeginning: true });
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`read ${found.length} of ${total} dead letters in 30 s`)), 30_000);
      void consumer.run({
        autoCommit: false,
        eachMessage: async ({ topic, partition, message }) => {
          const h = (k: string) => message.headers?.[k]?.toString() ?? '';
          found.push({ topic, partition, offset: message.offset, code: h('dlq-error-code'), message: h('dlq-error-message'), source: `${h('dlq-source-topic')}/${h('dlq-source-partition')}@${h('dlq-source-offset')}` });
          if (found.length >= total) {
            clearTimeout(timer);
            resolve();
          }
        },
      });
    });
  } finally {
    await consumer.disconnect();
  }
  return found;
}
