import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { runProduction } from '@labelflow/producer';
import { startStack, type TestStack } from '@labelflow/testing';
import { auditStack } from './audit';
import { formatReport } from '@labelflow/auditor';

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
      seed: 7,
      // billing-svc is only called to create the projects, so it can die and come back mid-run
      // without the simulated users noticing; its consumers must pick up where they were.
      onProgress: (done) => {
        if (done === 150 && !restarted) restarted = stack.processes['billing-svc'].kill().then(() => stack.start('billing-svc'));
      },
    });
    await restarted;
    expect(summary.unexpected, JSON.stringify(summary.unexpected.slice(0, 5))).toEqual([]);
    for (const scenario of ['happy', 'reject', 'billing_fail', 'qa_timeout', 'cancel']) expect(summary.byScenario[scenario], scenario).toBeGreaterThan(0);
    expect(summary.duplicated).toBeGreaterThan(300);

    await stack.quiesce(120_000);
    const report = await auditStack(stack, infra.kafkaBrokers);
    expect(report.violations, formatReport(report)).toEqual([]);
    expect(report.counts.byStatus.completed).toBe(summary.byOutcome.completed ?? 0);
  }, 420_000);
});
