import { describe, expect, it } from 'vitest';
import type { AuditReport } from '@labelflow/auditor';
import type { LostReport } from './checks';
import { errorSignature, formatChaosReport, verdict, type ChaosResult } from './report';
import { planFaults } from './schedule';

const audit = (violations = 0): AuditReport => ({
  checkedAt: '2026-01-01T00:00:00.000Z',
  counts: { tasks: 10, projects: 2, byStatus: { completed: 10 } },
  violations: Array.from({ length: violations }, () => ({ invariant: 'BILLED_ONCE', taskId: '1', detail: 'twice' }) as AuditReport['violations'][number]),
  deadLetters: [],
  ok: violations === 0,
});
const lost = (n = 0): LostReport => ({ outboxRows: 70, unpublishedRows: 0, topicMessages: 90, distinctEventIds: 70, notOnKafka: n, missingInboxRows: 0, lost: n, sample: [], notes: [] });
const planned = planFaults({ tasks: 10, seed: 1, killsPerService: 1, pgDrops: 1, redisOutageMs: 5_000, pauseMs: 8_000, window: [0.05, 0.8] });
const result = (over: Partial<ChaosResult> = {}): ChaosResult => ({
  tasks: 10,
  duplicates: 0.3,
  seed: 1,
  qaSlaMs: 15_000,
  prefix: 'lf_x',
  startedAt: '2026-01-01T00:00:00.000Z',
  durationMs: 1_000,
  phasesMs: { load: 500 },
  planned,
  faults: planned.map((f) => ({ ...f, startedAt: '2026-01-01T00:00:00.000Z', tasksDone: f.atTasks, afterLoad: false, outageMs: 1_000, recoveryMs: 100, recovered: true })),
  production: { byScenario: { happy: 10 }, byOutcome: { completed: 10 }, matrix: { happy: { completed: 10 } }, unexpected: [], duplicated: 3, latencyMs: { p50: 1, p99: 2 }, durationMs: 500, requestsPerStep: 1 },
  quiesced: true,
  audit: audit(),
  lost: lost(),
  findings: [],
  proxies: {},
  harnessErrors: [],
  notes: [],
  logDir: '/tmp/x',
  ...over,
});

describe('verdict', () => {
  it('passes with zero violations, zero unexpected outcomes and zero lost events', () => {
    expect(verdict(result())).toEqual({ pass: true, exitCode: 0, reasons: [] });
  });

  it('fails with exit 1 on any of the three, and on a service that died by itself', () => {
    expect(verdict(result({ audit: audit(1) })).exitCode).toBe(1);
    expect(verdict(result({ lost: lost(2) })).exitCode).toBe(1);
    const p = result().production!;
    expect(verdict(result({ production: { ...p, unexpected: [{ scenario: 'happy', outcome: 'error', error: 'claim: 409' }] } })).exitCode).toBe(1);
    expect(verdict(result({ findings: [{ at: 'now', service: 'qa-svc', what: 'exited by itself' }] })).exitCode).toBe(1);
  });

  it('fails with exit 2 when a check could not run', () => {
    const { audit: _omitted, ...withoutAudit } = result();
    expect(verdict({ ...withoutAudit, auditError: 'no database' })).toMatchObject({ pass: false, exitCode: 2 });
  });
});

describe('formatChaosReport', () => {
  it('prints one table row per fault kind, the saga outcomes and the three counts that decide', () => {
    const text = formatChaosReport(result());
    for (const row of ['faults: SIGKILL + restart | 4', 'faults: Redis outage | 1', 'sagas: completed | 10', '**unexpected outcomes** | 0', '**audit violations** | 0', '**lost events** | 0', 'verdict | PASS']) {
      expect(text).toContain(row);
    }
  });
});

describe('errorSignature', () => {
  it('reduces an unexpected outcome to its step, status and code', () => {
    expect(errorSignature('labels: 409 {"type":"urn:labelflow:problem:idempotency-key-in-flight","code":"IDEMPOTENCY_KEY_IN_FLIGHT"}')).toBe('labels: 409 IDEMPOTENCY_KEY_IN_FLIGHT');
    expect(errorSignature('review: 404 {"error":{"code":"REVIEW_NOT_FOUND","message":"x"}}')).toBe('review: 404 REVIEW_NOT_FOUND');
    expect(errorSignature('task 250516181184675840 still assigned (attempt 1) at the deadline')).toBe('still in flight at the load deadline');
  });
});
