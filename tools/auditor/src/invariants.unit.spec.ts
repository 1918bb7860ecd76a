import { describe, expect, it } from 'vitest';
import { checkInvariants, type AuditOptions } from './invariants';
import type { Snapshot } from './snapshot';

const now = new Date('2026-03-01T12:00:00.000Z');
const ago = (ms: number) => new Date(now.getTime() - ms);
const options: AuditOptions = { now, settleMs: 1_000, stuckMs: 60_000, outboxMs: 60_000 };
const P = 'project-1';

/** A project with one completed, correctly billed task; tests break one thing each. */
const healthy = (): Snapshot => ({
  tasks: [{ taskId: 't1', projectId: P, status: 'completed', attempt: 1, leaseExpiresAt: null, updatedAt: ago(10_000) }],
  labels: [{ taskId: 't1', attempt: 1, status: 'accepted' }],
  assignments: [{ taskId: 't1', attempt: 1, annotatorId: 'ann' }],
  reviews: [{ taskId: 't1', attempt: 1, status: 'passed', deadlineAt: ago(-1000) }],
  projects: [{ projectId: P, pricePerTask: 100, balance: 900 }],
  ledger: [
    { projectId: P, taskId: null, attempt: null, kind: 'topup', annotatorId: null, amount: 1_000 },
    { projectId: P, taskId: 't1', attempt: 1, kind: 'debit', annotatorId: null, amount: 100 },
    { projectId: P, taskId: 't1', attempt: 1, kind: 'credit', annotatorId: 'ann', amount: 100 },
  ],
  payouts: [{ annotatorId: 'ann', balance: 100 }],
  unpublished: [],
});
const invariantsOf = (s: Snapshot) => checkInvariants(s, options).map((v) => v.invariant);

describe('the saga invariants', () => {
  it('hold for a completed task billed once at the project price', () => {
    expect(checkInvariants(healthy(), options)).toEqual([]);
  });

  it('catch a completed task debited twice', () => {
    const s = healthy();
    const doubled = { ...s, ledger: [...s.ledger, { projectId: P, taskId: 't1', attempt: 2, kind: 'debit', annotatorId: null, amount: 100 }], projects: [{ projectId: P, pricePerTask: 100, balance: 800 }] };
    expect(invariantsOf(doubled)).toContain('BILLED_ONCE');
  });

  it('catch money booked without its task or attempt, which no per-attempt sum would see', () => {
    const s = healthy();
    const unattributed = (over: Partial<Snapshot['ledger'][number]>, balance: number) => ({
      ...s,
      ledger: [...s.ledger, { projectId: P, taskId: 't1', attempt: null, kind: 'debit', annotatorId: null, amount: 100, ...over }],
      projects: [{ projectId: P, pricePerTask: 100, balance }],
    });
    expect(invariantsOf(unattributed({}, 800))).toEqual(['LEDGER_ATTRIBUTED']);
    expect(invariantsOf(unattributed({ taskId: null, amount: 900 }, 0))).toEqual(['LEDGER_ATTRIBUTED']);
    expect(invariantsOf(unattributed({ taskId: null, kind: 'refund', amount: 9_000 }, 9_900))).toEqual(['LEDGER_ATTRIBUTED']);
  });

  it('catch a task not yet completed that holds half a billing, or two, on its current attempt, and accept one whole billing', () => {
    const s = healthy();
    const inReview = (ledger: Snapshot['ledger'], balance: number, payout: number): Snapshot => ({
      ...s,
      tasks: [{ ...s.tasks[0]!, status: 'labelled' }],
      ledger: [s.ledger[0]!, ...ledger],
      projects: [{ projectId: P, pricePerTask: 100, balance }],
      payouts: [{ annotatorId: 'ann', balance: payout }],
    });
    const credit = { projectId: P, taskId: 't1', attempt: 1, kind: 'credit', annotatorId: 'ann', amount: 100 } as const;
    const debit = { projectId: P, taskId: 't1', attempt: 1, kind: 'debit', annotatorId: null, amount: 100 } as const;
    expect(invariantsOf(inReview([credit], 1_000, 100))).toContain('BILLED_ONCE');
    expect(invariantsOf(inReview([debit, debit, credit, credit], 800, 200))).toContain('BILLED_ONCE');
    expect(invariantsOf(inReview([debit, credit], 900, 100))).not.toContain('BILLED_ONCE');
  });

  it("catch money paid on an open or assigned task's attempt that qa-svc never approved and label-svc holds no labels of, and accept a billing task-svc is only behind on", () => {
    const s = healthy();
    /** t1 on attempt 1 as `status`, billed whole (debit and credit of 100 to ann), with the given labels and review of attempt 1. */
    const billedWhile = (status: string, labels: Snapshot['labels'], reviews: Snapshot['reviews']): Snapshot => ({ ...s, tasks: [{ ...s.tasks[0]!, status, leaseExpiresAt: status === 'assigned' ? ago(-3_600_000) : null }], labels, reviews });
    const labels = [{ taskId: 't1', attempt: 1, status: 'submitted', annotatorId: 'ann' }];
    const passed = [{ taskId: 't1', attempt: 1, status: 'passed', deadlineAt: null }];
    expect(checkInvariants(billedWhile('open', [], []), options).map((v) => [v.invariant, v.detail])).toEqual([
      ['BILLED_APPROVED', "open task's attempt 1 is billed, yet task-svc has never had the attempt claimed; qa-svc's review of it is missing, not passed; label-svc's labels of it are missing"],
    ]);
    expect(checkInvariants(billedWhile('assigned', [], []), options).map((v) => [v.invariant, v.detail])).toEqual([
      ['BILLED_APPROVED', "assigned task's attempt 1 is billed, yet qa-svc's review of it is missing, not passed; label-svc's labels of it are missing"],
    ]);
    expect(invariantsOf(billedWhile('in_review', labels, [{ ...passed[0]!, status: 'pending' }]))).toEqual(['BILLED_APPROVED']);
    expect(invariantsOf(billedWhile('labelled', [{ ...labels[0]!, status: 'rejected' }], passed))).toEqual(['BILLED_APPROVED']);
    // Nothing before it is missing, so task-svc is only behind; only it cannot be behind into `open`.
    expect(checkInvariants(billedWhile('assigned', labels, passed), options)).toEqual([]);
    expect(checkInvariants(billedWhile('approved', [{ ...labels[0]!, status: 'accepted' }], passed), options)).toEqual([]);
    expect(invariantsOf(billedWhile('open', labels, passed))).toEqual(['BILLED_APPROVED']);
    // The labels name another annotator than the one paid: that is LEDGER_ATTRIBUTED's to say, once.
    expect(invariantsOf(billedWhile('assigned', [{ ...labels[0]!, annotatorId: 'bob' }], passed))).toEqual(['LEDGER_ATTRIBUTED']);
    // A billing that failed (review revoked, labels voided for it) and was retried: billing-svc's
    // record says the retry completed, and qa-svc and label-svc have yet to read its BillingCompleted.
    const revoked = [{ ...passed[0]!, status: 'revoked', closeReason: 'BILLING_FAILED' }];
    const voided = [{ ...labels[0]!, status: 'voided', voidReason: 'BILLING_FAILED' }];
    const retried = (snapshot: Snapshot, status: string): Snapshot => ({ ...snapshot, billings: [{ taskId: 't1', attempt: 1, annotatorId: 'ann', status }] });
    expect(checkInvariants(retried(billedWhile('approved', voided, revoked), 'completed'), options)).toEqual([]);
    // Not for another reason, and not while billing-svc does not say the retry completed.
    expect(invariantsOf(retried(billedWhile('approved', voided, [{ ...revoked[0]!, closeReason: 'CANCELLED' }]), 'completed'))).toEqual(['BILLED_APPROVED']);
    expect(invariantsOf(retried(billedWhile('approved', voided, revoked), 'failed'))).toContain('BILLED_APPROVED');
  });

  it('catch a budget that does not equal top-ups minus debits plus refunds', () => {
    expect(invariantsOf({ ...healthy(), projects: [{ projectId: P, pricePerTask: 100, balance: 950 }] })).toEqual(['BUDGET_BALANCE']);
  });

  it('catch a cancelled task whose debit was never refunded and whose review and labels stayed approved', () => {
    const s = healthy();
    const cancelled = { ...s, tasks: [{ ...s.tasks[0]!, status: 'cancelled' }] };
    expect(invariantsOf(cancelled).sort()).toEqual(['COMPENSATED', 'COMPENSATED', 'COMPENSATED', 'NO_SURVIVING_DEBIT']);
  });

  it('catch a cancelled task whose review is still pending and whose labels still wait for a verdict', () => {
    const s = healthy();
    const open: Snapshot = {
      ...s,
      tasks: [{ ...s.tasks[0]!, status: 'cancelled' }],
      labels: [{ taskId: 't1', attempt: 1, status: 'submitted' }],
      assignments: [{ taskId: 't1', attempt: 1, annotatorId: null }],
      reviews: [{ taskId: 't1', attempt: 1, status: 'pending', deadlineAt: null }],
      projects: [{ projectId: P, pricePerTask: 100, balance: 1_000 }],
      ledger: s.ledger.filter((e) => e.kind === 'topup'),
      payouts: [],
    };
    expect(checkInvariants(open, options).map((v) => [v.invariant, v.detail])).toEqual([
      ['COMPENSATED', 'cancelled task keeps a pending review (attempt 1) in qa-svc'],
      ['COMPENSATED', 'cancelled task keeps submitted labels (attempt 1) in label-svc'],
    ]);
  });

  it('accept a cancelled task whose money was refunded and whose parts were compensated', () => {
    const s = healthy();
    const refunded: Snapshot = {
      ...s,
      tasks: [{ ...s.tasks[0]!, status: 'cancelled' }],
      labels: [{ taskId: 't1', attempt: 1, status: 'voided' }],
      assignments: [{ taskId: 't1', attempt: 1, annotatorId: null }],
      reviews: [{ taskId: 't1', attempt: 1, status: 'revoked', deadlineAt: null }],
      projects: [{ projectId: P, pricePerTask: 100, balance: 1_000 }],
      ledger: [...s.ledger, { projectId: P, taskId: 't1', attempt: 1, kind: 'refund', annotatorId: null, amount: 100 }, { projectId: P, taskId: 't1', attempt: 1, kind: 'reversal', annotatorId: 'ann', amount: 100 }],
      payouts: [{ annotatorId: 'ann', balance: 0 }],
    };
    expect(checkInvariants(refunded, options)).toEqual([]);
  });

  it('catch an assigned task whose lease ended long ago without a reopening', () => {
    const s = healthy();
    const stuck = { ...s, tasks: [...s.tasks, { taskId: 't2', projectId: P, status: 'assigned', attempt: 1, leaseExpiresAt: ago(120_000), updatedAt: ago(200_000) }] };
    expect(invariantsOf(stuck)).toEqual(['NOT_STUCK']);
  });

  it('catch an assigned task, long within its lease, whose claim label-svc never learned of, and pass one it knows', () => {
    const s = healthy();
    const held = { taskId: 't2', projectId: P, status: 'assigned', attempt: 2, assignee: 'ann-2', leaseExpiresAt: new Date(now.getTime() + 3_600_000), updatedAt: ago(200_000) };
    const unknown = { ...s, tasks: [...s.tasks, held], assignments: [...s.assignments, { taskId: 't2', attempt: 1, annotatorId: null }] };
    expect(invariantsOf(unknown)).toEqual(['NOT_STUCK']);
    const known = { ...unknown, assignments: [...s.assignments, { taskId: 't2', attempt: 2, annotatorId: 'ann-2' }] };
    expect(checkInvariants(known, options)).toEqual([]);
  });

  it('give a task that just changed time to settle before judging it', () => {
    const s = healthy();
    const fresh = { ...s, tasks: [{ ...s.tasks[0]!, status: 'cancelled', updatedAt: ago(10) }] };
    expect(checkInvariants(fresh, options)).toEqual([]);
  });

  it('catch an outbox row left unpublished beyond the bound', () => {
    expect(invariantsOf({ ...healthy(), unpublished: [{ service: 'qa-svc', id: '7', eventType: 'QaPassed', createdAt: ago(120_000) }] })).toEqual(['OUTBOX_DRAINED']);
  });

  it('catch an outbox row the relay parked however young it is, since nothing but an operator publishes it, and give a waiting one its bound', () => {
    const young = { service: 'qa-svc', id: '8', eventType: 'QaPassed', createdAt: ago(2_000) };
    expect(checkInvariants({ ...healthy(), unpublished: [{ ...young, parkedAt: null, failure: null }] }, options)).toEqual([]);
    const parked = { ...young, parkedAt: ago(1_000), failure: 'too large for the topic (MESSAGE_TOO_LARGE)' };
    expect(checkInvariants({ ...healthy(), unpublished: [parked] }, options).map((v) => [v.invariant, v.detail])).toEqual([
      ['OUTBOX_DRAINED', `qa-svc outbox row 8 (QaPassed) parked by the relay at ${ago(1_000).toISOString()}: too large for the topic (MESSAGE_TOO_LARGE); it is never published until an operator releases it (failed_at = NULL)`],
    ]);
  });

  it('catch payouts that do not equal credits minus reversals', () => {
    expect(invariantsOf({ ...healthy(), payouts: [{ annotatorId: 'ann', balance: 300 }] })).toEqual(['PAYOUT_BALANCE']);
  });

  it('catch a completed task whose review was revoked or whose labels were voided after it completed', () => {
    const s = healthy();
    expect(invariantsOf({ ...s, reviews: [{ ...s.reviews[0]!, status: 'revoked' }] })).toEqual(['COMPLETED_KEPT']);
    expect(invariantsOf({ ...s, labels: [{ ...s.labels[0]!, status: 'voided' }] })).toEqual(['COMPLETED_KEPT']);
    expect(invariantsOf({ ...s, labels: [], reviews: [] })).toEqual(['COMPLETED_KEPT', 'COMPLETED_KEPT']);
  });

  it('catch money booked for a task task-svc does not have, on another project\'s books, or paid to someone who did not label the attempt', () => {
    const s = { ...healthy(), labels: [{ taskId: 't1', attempt: 1, status: 'accepted', annotatorId: 'ann' }] };
    expect(checkInvariants(s, options)).toEqual([]);
    const unknown = { ...s, ledger: [...s.ledger, { projectId: P, taskId: 'ghost', attempt: 1, kind: 'debit', annotatorId: null, amount: 0 }] };
    expect(invariantsOf(unknown)).toEqual(['LEDGER_ATTRIBUTED']);
    const elsewhere = { ...s, ledger: s.ledger.map((e) => (e.kind === 'credit' ? { ...e, projectId: 'project-2' } : e)) };
    expect(invariantsOf(elsewhere)).toEqual(['LEDGER_ATTRIBUTED']);
    const wrongPayee = { ...s, ledger: s.ledger.map((e) => (e.kind === 'credit' ? { ...e, annotatorId: 'mallory' } : e)), payouts: [{ annotatorId: 'mallory', balance: 100 }] };
    expect(checkInvariants(wrongPayee, options)).toEqual([expect.objectContaining({ invariant: 'LEDGER_ATTRIBUTED', detail: 'a credit of 100 names mallory; attempt 1 was labelled by ann' })]);
  });

  it('count each payout in its own currency: a EUR credit never makes up for a USD payout', () => {
    const s = healthy();
    const twoCurrencies: Snapshot = {
      ...s,
      projects: [{ ...s.projects[0]!, currency: 'EUR' }, { projectId: 'project-2', currency: 'USD', pricePerTask: 100, balance: 0 }],
      payouts: [{ annotatorId: 'ann', currency: 'EUR', balance: 100 }],
    };
    expect(checkInvariants(twoCurrencies, options)).toEqual([]);
    const mixed = { ...twoCurrencies, payouts: [{ annotatorId: 'ann', currency: 'USD', balance: 100 }] };
    expect(checkInvariants(mixed, options).map((v) => v.detail)).toEqual(['payout of ann in USD is 100, credits - reversals = 0', 'payout of ann in EUR is 0, credits - reversals = 100']);
    // A billing database from before payouts had a currency: one payout per annotator, all currencies in it.
    const unsplit = { ...twoCurrencies, payouts: [{ annotatorId: 'ann', balance: 100 }] };
    expect(checkInvariants(unsplit, options)).toEqual([]);
  });

  it('catch credits to an annotator who has no payout row at all', () => {
    expect(checkInvariants({ ...healthy(), payouts: [] }, options)).toEqual([expect.objectContaining({ invariant: 'PAYOUT_BALANCE', detail: 'payout of ann is 0, credits - reversals = 100' })]);
  });

  /** t1 reworked: attempt 2 completed and billed, attempt 1's labels and review as given. */
  const reworkedWith = (attempt1: { labels: string; review: string }): Snapshot => {
    const s = healthy();
    return {
      ...s,
      tasks: [{ ...s.tasks[0]!, attempt: 2 }],
      labels: [{ taskId: 't1', attempt: 1, status: attempt1.labels }, { taskId: 't1', attempt: 2, status: 'accepted' }],
      reviews: [{ taskId: 't1', attempt: 1, status: attempt1.review, deadlineAt: null }, { taskId: 't1', attempt: 2, status: 'passed', deadlineAt: null }],
      ledger: s.ledger.map((e) => (e.taskId ? { ...e, attempt: 2 } : e)),
    };
  };

  it('catch a superseded attempt that keeps its approval after the rework was completed and billed', () => {
    const reworked = reworkedWith({ labels: 'accepted', review: 'passed' });
    expect(invariantsOf(reworked)).toEqual(['COMPENSATED', 'COMPENSATED']);
    expect(checkInvariants(reworkedWith({ labels: 'voided', review: 'revoked' }), options)).toEqual([]);
  });

  it('catch a superseded attempt whose labels still wait for a verdict, or whose review is still pending', () => {
    expect(checkInvariants(reworkedWith({ labels: 'submitted', review: 'pending' }), options).map((v) => v.detail)).toEqual([
      'superseded attempt 1 keeps a pending review in qa-svc (task on attempt 2)',
      'superseded attempt 1 keeps submitted labels in label-svc (task on attempt 2)',
    ]);
  });
});

describe('the saga invariants for labels a model submitted', () => {
  const M = 'model.cat-detector@2.1';
  /** t1 completed on a model's labels at a machine price of 30: a debit, no credit. */
  const machine = (machinePricePerTask = 30): Snapshot => ({
    ...healthy(),
    projects: [{ projectId: P, pricePerTask: 100, machinePricePerTask, balance: 1_000 - machinePricePerTask }],
    billings: [{ taskId: 't1', attempt: 1, annotatorId: M, status: 'completed' }],
    ledger: [
      { projectId: P, taskId: null, attempt: null, kind: 'topup', annotatorId: null, amount: 1_000 },
      ...(machinePricePerTask > 0 ? [{ projectId: P, taskId: 't1', attempt: 1, kind: 'debit', annotatorId: null, amount: machinePricePerTask }] : []),
    ],
    payouts: [],
  });

  it('hold for a completed task charged its machine price with nobody credited', () => {
    expect(checkInvariants(machine(), options)).toEqual([]);
  });

  it('hold for a completed task at a machine price of 0 with nothing booked', () => {
    expect(checkInvariants(machine(0), options)).toEqual([]);
  });

  it('flag a model paid like a person, or charged the task price', () => {
    const paid = machine();
    const credited = { ...paid, ledger: [...paid.ledger, { projectId: P, taskId: 't1', attempt: 1, kind: 'credit', annotatorId: M, amount: 30 }], payouts: [{ annotatorId: M, balance: 30 }] };
    expect(invariantsOf(credited)).toEqual(expect.arrayContaining(['BILLED_ONCE', 'MACHINE_UNPAID']));
    const taskPrice = { ...paid, projects: [{ projectId: P, pricePerTask: 100, machinePricePerTask: 30, balance: 900 }], ledger: [paid.ledger[0]!, { projectId: P, taskId: 't1', attempt: 1, kind: 'debit', annotatorId: null, amount: 100 }] };
    expect(invariantsOf(taskPrice)).toEqual(['BILLED_ONCE']);
  });

  it('flag a person\'s labels billed as a model\'s (the person unpaid, the project charged the machine price), which no sum shows', () => {
    const byModel = { ...machine(), labels: [{ taskId: 't1', attempt: 1, status: 'accepted', annotatorId: M }] };
    expect(checkInvariants(byModel, options)).toEqual([]);
    const byPerson = { ...machine(), labels: [{ taskId: 't1', attempt: 1, status: 'accepted', annotatorId: 'ann' }] };
    expect(checkInvariants(byPerson, options).map((v) => [v.invariant, v.detail])).toEqual([['LEDGER_ATTRIBUTED', `billing of attempt 1 names ${M}; it was labelled by ann`]]);
  });
});

describe('the saga invariants for who approved a payment', () => {
  const approved = (approvedBy: string | null): Snapshot => ({
    ...healthy(),
    labels: [{ taskId: 't1', attempt: 1, status: 'accepted', annotatorId: 'ann' }],
    billings: [{ taskId: 't1', attempt: 1, annotatorId: 'ann', status: 'completed', approvedBy }],
  });

  it('hold for a payment another person approved, and for billings from before approvers were kept', () => {
    expect(checkInvariants(approved('rev-1'), options)).toEqual([]);
    expect(checkInvariants(approved(null), options)).toEqual([]);
  });

  it('flag a payment for work its own annotator approved, which every sum agrees with', () => {
    expect(checkInvariants(approved('ann'), options).map((v) => [v.invariant, v.detail])).toEqual([['LEDGER_ATTRIBUTED', 'billing of attempt 1 pays ann for work ann approved']]);
  });
});

describe('the saga invariants for what each service recorded of a task', () => {
  const cancelledEverywhere = (): Snapshot => ({
    ...healthy(),
    tasks: [{ ...healthy().tasks[0]!, status: 'cancelled' }],
    labels: [{ taskId: 't1', attempt: 1, status: 'voided' }],
    assignments: [{ taskId: 't1', attempt: 1, annotatorId: null, cancelled: true }],
    reviews: [{ taskId: 't1', attempt: 1, status: 'revoked', deadlineAt: null }],
    reviewTasks: [{ taskId: 't1', cancelled: true }],
    billingTasks: [{ taskId: 't1', latestAttempt: 1, cancelled: true }],
    projects: [{ projectId: P, pricePerTask: 100, balance: 1_000 }],
    ledger: [healthy().ledger[0]!],
    payouts: [],
  });
  const details = (s: Snapshot) => checkInvariants(s, options).map((v) => [v.invariant, v.detail]);

  it('hold for a cancelled task whose cancellation every service recorded', () => {
    expect(checkInvariants(cancelledEverywhere(), options)).toEqual([]);
  });

  it('flag a cancelled task a service has no cancellation of (its TaskCancelled dead-lettered), before any late event moves money', () => {
    const s = cancelledEverywhere();
    expect(details({ ...s, billingTasks: [] })).toEqual([['COMPENSATED', "cancelled task's cancellation is not recorded in billing-svc (a late approval would be charged)"]]);
    expect(details({ ...s, reviewTasks: [{ taskId: 't1', cancelled: false }] })).toEqual([['COMPENSATED', "cancelled task's cancellation is not recorded in qa-svc (late labels would open a review)"]]);
    expect(details({ ...s, assignments: [{ taskId: 't1', attempt: 1, annotatorId: null, cancelled: false }] })).toEqual([['COMPENSATED', "cancelled task's cancellation is not recorded in label-svc (a late claim would take labels)"]]);
  });

  it('flag a reworked task whose current attempt billing-svc never learnt, so a late approval of the superseded one would be charged', () => {
    const s = healthy();
    const reworked = (latestAttempt: number): Snapshot => ({
      ...s,
      tasks: [{ ...s.tasks[0]!, status: 'open', attempt: 2 }],
      labels: [{ taskId: 't1', attempt: 1, status: 'voided' }],
      reviews: [{ taskId: 't1', attempt: 1, status: 'rejected', deadlineAt: null }],
      billingTasks: [{ taskId: 't1', latestAttempt, cancelled: false }],
      projects: [{ projectId: P, pricePerTask: 100, balance: 1_000 }],
      ledger: [s.ledger[0]!],
      payouts: [],
    });
    expect(checkInvariants(reworked(2), options)).toEqual([]);
    expect(details(reworked(1))).toEqual([['COMPENSATED', 'billing-svc knows attempt 1 of a task on attempt 2: a late approval of a superseded attempt would be charged']]);
  });

  it('flag a completed task whose billing-svc record of the attempt is not completed, also where no money moved', () => {
    const billed = (status: string): Snapshot => ({ ...healthy(), billings: [{ taskId: 't1', attempt: 1, annotatorId: 'ann', status }] });
    expect(checkInvariants(billed('completed'), options)).toEqual([]);
    expect(details(billed('failed'))).toEqual([['BILLED_ONCE', "completed task's billing of attempt 1 is failed in billing-svc"]]);
    expect(details({ ...healthy(), billings: [] })).toEqual([['BILLED_ONCE', "completed task's billing of attempt 1 is missing in billing-svc"]]);
  });

  it('flag a rework\'s review that no verdict can reach because qa-svc never read the reopen that began its attempt', () => {
    const s = healthy();
    const gated = (reopenedAttempt: number, updatedAt: Date): Snapshot => ({
      ...s,
      tasks: [{ ...s.tasks[0]!, status: 'in_review', attempt: 2, updatedAt }],
      labels: [{ taskId: 't1', attempt: 1, status: 'voided' }, { taskId: 't1', attempt: 2, status: 'submitted' }],
      reviews: [{ taskId: 't1', attempt: 1, status: 'rejected', deadlineAt: null }, { taskId: 't1', attempt: 2, status: 'pending', deadlineAt: ago(-3_600_000) }],
      reviewTasks: [{ taskId: 't1', cancelled: false, reopenedAttempt }],
      projects: [{ projectId: P, pricePerTask: 100, balance: 1_000 }],
      ledger: [s.ledger[0]!],
      payouts: [],
    });
    expect(checkInvariants(gated(2, ago(120_000)), options)).toEqual([]);
    expect(checkInvariants(gated(1, ago(10_000)), options)).toEqual([]);
    expect(details(gated(1, ago(120_000)))).toEqual([
      ['NOT_STUCK', "the review of attempt 2 waits for qa-svc to read the task's reopen to it (it has read attempt 1's; a dead-lettered TaskReopened?): no verdict lands before its deadline times it out"],
    ]);
  });
});
