import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { runProduction } from '@labelflow/producer';
import { metricValue, queryRows, serviceNames, startStack, type TestStack } from '@labelflow/testing';
import { auditStack } from './audit';
import { formatReport } from '@labelflow/auditor';

/**
 * The event types each service reacts to (docs/sagas.md), whose inbox keys are the events'
 * own types. (label-svc's machine proposals key their inbox by model as well; this run has none.)
 */
const READS: Record<(typeof serviceNames)[number], readonly string[]> = {
  'task-svc': ['LabelSubmitted', 'QaStarted', 'QaPassed', 'QaRejected', 'QaTimedOut', 'BillingCompleted', 'BillingFailed'],
  'label-svc': ['TaskAssigned', 'TaskCancelled', 'TaskReopened', 'QaPassed', 'QaRejected', 'QaTimedOut', 'BillingCompleted', 'BillingFailed', 'BillingRefunded'],
  'qa-svc': ['LabelSubmitted', 'TaskCancelled', 'TaskReopened', 'BillingCompleted', 'BillingFailed', 'BillingRefunded'],
  'billing-svc': ['QaPassed', 'TaskCancelled', 'TaskReopened'],
};

describe('a mixed production run', () => {
  const infra = inject('infra');
  let stack: TestStack;
  beforeAll(async () => {
    stack = await startStack(infra, { 'qa-svc': { QA_SLA_MS: '8000', SWEEP_INTERVAL_MS: '200' } });
  });
  afterAll(async () => stack?.stop());

  it('ends with every invariant holding after 500 tasks with every failure type, 30% duplicate deliveries and a crashed service', async () => {
    const url = (name: Parameters<TestStack['http']>[0]) => stack.processes[name].url;
    let restarted: Promise<unknown> | undefined;
    const summary = await runProduction({
      urls: { task: url('task-svc'), label: url('label-svc'), qa: url('qa-svc'), billing: url('billing-svc') },
      tasks: 500,
      concurrency: 24,
      annotators: 12,
      price: 40,
      rates: { reject: 0.15, billingFail: 0.05, qaTimeout: 0.03, cancel: 0.05 },
      duplicates: 0.3,
      kafka: { brokers: infra.kafkaBrokers.split(','), topicPrefix: stack.prefix },
      timeoutMs: 240_000,
      runTimeoutMs: 240_000,
      seed: 7,
      // billing-svc is only called to create the projects, so it can die and come back mid-run
      // without the simulated users noticing; its consumers must pick up where they were.
      onProgress: (done) => {
        if (done === 150 && !restarted) restarted = stack.processes['billing-svc'].kill().then(() => stack.start('billing-svc'));
      },
    });
    await restarted;
    expect(summary.unexpected, JSON.stringify(summary.unexpected.slice(0, 5))).toEqual([]);
    // No fault hits what the users call: not one 503 was sent again.
    expect(summary.unavailable).toBe(0);
    for (const scenario of ['happy', 'reject', 'billing_fail', 'qa_timeout', 'cancel']) expect(summary.byScenario[scenario], scenario).toBeGreaterThan(0);
    // About 30% of every message on the four topics: thousands, never a token few.
    expect(summary.duplicated).toBeGreaterThan(1_000);

    await stack.quiesce(120_000);
    // Exactly once, counted: each service holds one inbox row per distinct (task, type, attempt)
    // the others emitted of the types it reads, however often they were delivered ...
    const emitted = new Map<string, Set<string>>();
    for (const svc of serviceNames) {
      for (const row of await queryRows<{ k: string; t: string }>(stack.databases[svc], `SELECT DISTINCT message_key || ':' || event_type || ':' || (payload->>'attempt') AS k, event_type AS t FROM outbox`)) {
        emitted.set(row.t, (emitted.get(row.t) ?? new Set()).add(row.k));
      }
    }
    for (const svc of serviceNames) {
      const held = new Map((await queryRows<{ t: string; n: string }>(stack.databases[svc], 'SELECT event_type AS t, count(*) AS n FROM inbox GROUP BY event_type')).map((r) => [r.t, Number(r.n)]));
      // Per type the service reads, by the saga's design: a type it dropped unread would show as
      // missing here, not vanish from both sides of the count.
      expect([...held.keys()].filter((t) => !READS[svc].includes(t)), `${svc} inbox types beyond what it reads`).toEqual([]);
      for (const t of READS[svc]) expect(held.get(t) ?? 0, `${svc} inbox rows of ${t}`).toBe(emitted.get(t)?.size ?? 0);
      // ... and caught at least every duplicate the duplicator sent of those types (its counters
      // cover its whole life: billing-svc restarted mid-run, so it is checked by its inbox alone).
      if (svc === 'billing-svc') continue;
      const caught = metricValue(await stack.metrics(svc), 'dedup_duplicates_total');
      const sent = READS[svc].reduce((n, t) => n + (summary.duplicatedByType[t] ?? 0), 0);
      expect(caught, `${svc} duplicates caught`).toBeGreaterThanOrEqual(sent);
      expect(sent, `${svc} duplicates sent`).toBeGreaterThan(0);
    }
    const report = await auditStack(stack, infra.kafkaBrokers);
    expect(report.violations, formatReport(report)).toEqual([]);
    expect(report.counts.byStatus.completed).toBe(summary.byOutcome.completed ?? 0);
  }, 420_000);
});
