import { describe, expect, it } from 'vitest';
import { BillingRefunded, type AnnotatorId, type ProjectId, type QaPassed, type ReviewerId, type TaskCancelled, type TaskId, type TaskReopened } from '@labelflow/contracts';
import type { EventDraft } from '@labelflow/service-kit';
import { deciderSpec } from '@labelflow/testing';
import { billingDecider, noFaults, type BillingCommand, type BillingDecision, type BillingFaults } from './decide';
import { faultsOf } from './faults';
import { emptyBilling, type BillingStateEvent, type BillingTaskState, type ProjectBudget } from './state';

const taskId = '11111111-1111-4111-8111-111111111111' as TaskId;
const projectId = '22222222-2222-4222-8222-222222222222' as ProjectId;
const ann = 'ann-1' as AnnotatorId;
const envelope = (attempt: number) => ({ version: 1 as const, taskId, projectId, attempt });

const qaPassed = (attempt = 1, annotatorId: AnnotatorId = ann): EventDraft<QaPassed> => ({ ...envelope(attempt), type: 'QaPassed', payload: { annotatorId, reviewerId: 'rev-1' as ReviewerId } });
const cancelled = (attempt = 1): EventDraft<TaskCancelled> => ({ ...envelope(attempt), type: 'TaskCancelled', payload: { reason: 'withdrawn', cancelledBy: 'admin', previousStatus: 'completed' } });
const reopened = (attempt: number): EventDraft<TaskReopened> => ({ ...envelope(attempt), type: 'TaskReopened', payload: { reason: 'LEASE_EXPIRED', previousAttempt: attempt - 1, previousAnnotatorId: ann } });
const project = (balance: number, pricePerTask = 500, machinePricePerTask = 40): ProjectBudget => ({ projectId, currency: 'EUR', pricePerTask, machinePricePerTask, balance, version: 3 });

const bill = (event = qaPassed()): BillingCommand => ({ type: 'BillTask', event });
const retry = (): BillingCommand => ({ type: 'RetryBilling', taskId });
const observe = (event: EventDraft<TaskCancelled | TaskReopened>): BillingCommand => ({ type: 'Observe', event });

/** Billing's decider with the faults injected (none unless a test says so); an observed event is folded in before the decided ones. */
const billing = (faults: BillingFaults = noFaults) => {
  const decider = billingDecider({ faults });
  return { decider, ...deciderSpec(decider, { initial: () => emptyBilling(taskId), observed: (c) => (c.type === 'Observe' ? [c.event] : []) }) };
};
const { decider: { decide }, givenFrom, when, rejectionCode: code } = billing();

/** Given a starting budget and events, the state; then a command's decision and the state after. */
const given = (budget: ProjectBudget | null, ...events: BillingStateEvent[]) => givenFrom(emptyBilling(taskId, budget), ...events);
const run = (state: BillingTaskState, command: BillingCommand) => {
  const { decision, state: after } = when(state, command);
  return { decision, after };
};
const types = (d: BillingDecision) => (d.ok ? d.events.map((e) => e.type) : []);
const completed = (state: BillingTaskState, command = bill()) => run(state, command).after;

describe('billing-svc: billing an approved attempt', () => {
  it('debits the price when the budget covers it and names the annotator paid and the reviewer who approved', () => {
    const { decision, after } = run(given(project(1_000)), bill());
    expect(decision).toEqual({ ok: true, events: [{ ...envelope(1), type: 'BillingCompleted', payload: { annotatorId: ann, amount: 500, approvedBy: 'rev-1' } }] });
    expect(after.project?.balance).toBe(500);
  });

  it('fails with INSUFFICIENT_BUDGET and moves no money when the budget is short', () => {
    const { decision, after } = run(given(project(499)), bill());
    expect(decision.ok && decision.events[0]?.type === 'BillingFailed' && decision.events[0].payload.reason).toBe('INSUFFICIENT_BUDGET');
    expect(after.project?.balance).toBe(499);
  });

  it('fails with PROJECT_NOT_FOUND when the project does not exist', () => {
    const { decision } = run(given(null), bill());
    expect(decision.ok && decision.events[0]?.type === 'BillingFailed' && decision.events[0].payload.reason).toBe('PROJECT_NOT_FOUND');
  });

  it('fails with INJECTED_FAILURE for annotators matching the fault prefix, whatever the budget', () => {
    const { decision } = billing(faultsOf({ FAULT_BILLING_FAILURE_PREFIX: 'fail-' })).when(given(project(10_000)), bill(qaPassed(1, 'fail-bob' as AnnotatorId)));
    expect(decision.ok && decision.events[0]?.type === 'BillingFailed' && decision.events[0].payload.reason).toBe('INJECTED_FAILURE');
  });

  it('injects no failure when the fault prefix is empty, and pays annotators the prefix does not match', () => {
    expect(faultsOf({ FAULT_BILLING_FAILURE_PREFIX: '' }).billingFails('fail-bob' as AnnotatorId)).toBe(false);
    expect(types(billing(faultsOf({ FAULT_BILLING_FAILURE_PREFIX: 'fail-' })).when(given(project(10_000)), bill()).decision)).toEqual(['BillingCompleted']);
  });

  it('tells the admin who retries the billing of an annotator the faults still fail, and changes nothing', () => {
    const failed = completed(given(project(100)));
    const toppedUp = { ...failed, project: project(1_000) };
    const outcome = billing({ billingFails: (annotatorId) => annotatorId === ann }).when(toppedUp, retry());
    expect(outcome.rejection).toBe('INJECTED_FAILURE');
    expect(outcome.state).toBe(toppedUp);
  });

  it('refuses to bill an attempt twice', () => {
    expect(code(decide(bill(), completed(given(project(5_000)))))).toBe('ALREADY_BILLED');
  });

  it('does not bill a failed attempt when its approval is read again: only an admin\'s retry completes it', () => {
    const failed = completed(given(project(100)));
    const decision = decide(bill(), { ...failed, project: project(1_000) });
    expect(decision).toEqual({ ok: false, reason: { code: 'ALREADY_BILLED', message: `task ${taskId} attempt 1 is already failed; retry it with POST /tasks/:taskId/billing/retry` } });
  });

  it('never bills the approval of an older attempt that arrives after a newer attempt was billed, or failed', () => {
    const newerBilled = completed(given(project(1_000)), bill(qaPassed(2, 'ann-2' as AnnotatorId)));
    expect(newerBilled.latestAttempt).toBe(1); // the TaskReopened has not arrived
    expect(code(decide(bill(qaPassed(1)), newerBilled))).toBe('ATTEMPT_SUPERSEDED');
    const newerFailed = completed(given(project(100)), bill(qaPassed(2, 'ann-2' as AnnotatorId)));
    expect(code(decide(bill(qaPassed(1)), { ...newerFailed, project: project(1_000) }))).toBe('ATTEMPT_SUPERSEDED');
  });

  it('refuses with PROJECT_MISMATCH an approval naming another project than the one the task is billed in, and moves no money', () => {
    const billed = completed(given(project(1_000)));
    const other = '33333333-3333-4333-8333-333333333333' as ProjectId;
    const elsewhere: EventDraft<QaPassed> = { ...qaPassed(2), projectId: other };
    const { decision, after } = run(billed, bill(elsewhere));
    expect(code(decision)).toBe('PROJECT_MISMATCH');
    expect(after).toEqual(billed);
  });

  it('bills attempt 2 after attempt 1 failed', () => {
    const failed = completed(given(project(100)));
    const { decision } = run({ ...failed, project: project(1_000) }, bill(qaPassed(2)));
    expect(types(decision)).toEqual(['BillingCompleted']);
  });
});

describe('billing-svc: retrying a failed billing', () => {
  it('bills the failed attempt once the budget was topped up, still in the name of the reviewer who approved it', () => {
    const failed = completed(given(project(100)));
    const { decision, after } = run({ ...failed, project: project(1_000) }, retry());
    expect(decision).toEqual({ ok: true, events: [{ ...envelope(1), type: 'BillingCompleted', payload: { annotatorId: ann, amount: 500, approvedBy: 'rev-1' } }] });
    expect(after.billings.map((b) => b.status)).toEqual(['completed']);
    expect(after.project?.balance).toBe(500);
  });

  it('tells the admin the budget is still short and changes nothing', () => {
    const failed = completed(given(project(100)));
    expect(run(failed, retry())).toEqual({ decision: { ok: false, reason: expect.objectContaining({ code: 'INSUFFICIENT_BUDGET' }) }, after: failed });
  });

  it('has nothing to retry for a billed or never-billed task', () => {
    expect(code(decide(retry(), given(project(1_000))))).toBe('NOTHING_TO_RETRY');
    expect(code(decide(retry(), completed(given(project(1_000)))))).toBe('NOTHING_TO_RETRY');
  });
});

describe('billing-svc: compensations', () => {
  it('refunds a billed task when it is cancelled, returning the debit to the budget in the name of who cancelled', () => {
    const billed = completed(given(project(1_000)));
    const { decision, after } = run(billed, observe(cancelled()));
    expect(decision).toEqual({ ok: true, events: [{ ...envelope(1), type: 'BillingRefunded', payload: { annotatorId: ann, amount: 500, reason: 'TASK_CANCELLED', refundedBy: 'admin' } }] });
    expect(after.project?.balance).toBe(1_000);
    expect(after.billings.map((b) => b.status)).toEqual(['refunded']);
  });

  it('still refunds a cancellation whose canceller is not an actor name, leaving refundedBy out rather than fail the refund schema', () => {
    const odd: EventDraft<TaskCancelled> = { ...cancelled(), payload: { ...cancelled().payload, cancelledBy: 'Jane Doe' } };
    const { decision } = run(completed(given(project(1_000))), observe(odd));
    expect(decision).toEqual({ ok: true, events: [{ ...envelope(1), type: 'BillingRefunded', payload: { annotatorId: ann, amount: 500, reason: 'TASK_CANCELLED' } }] });
    if (decision.ok) expect(BillingRefunded.safeParse({ ...decision.events[0], taskId: '7000000000000000001', id: '7000000000000000002', occurredAt: new Date(0).toISOString(), producer: 'billing-svc' }).error).toBeUndefined();
  });

  it('refunds nothing twice: a second cancellation finds nothing billed', () => {
    const refunded = run(completed(given(project(1_000))), observe(cancelled())).after;
    expect(decide(observe(cancelled()), refunded)).toEqual({ ok: true, events: [] });
  });

  it('never bills an approval that arrives after the cancellation it was overtaken by', () => {
    const tombstone = run(given(project(1_000)), observe(cancelled())).after;
    expect(tombstone.cancelled).toBe(true);
    expect(code(decide(bill(), tombstone))).toBe('TASK_CANCELLED');
  });

  it('never bills the approval of an attempt that a reopening already superseded', () => {
    const reopenedFirst = run(given(project(1_000)), observe(reopened(2))).after;
    expect(code(decide(bill(qaPassed(1)), reopenedFirst))).toBe('ATTEMPT_SUPERSEDED');
    expect(types(decide(bill(qaPassed(2)), reopenedFirst))).toEqual(['BillingCompleted']);
  });

  it('refunds an attempt that was billed before a newer attempt superseded it', () => {
    const { decision, after } = run(completed(given(project(1_000))), observe(reopened(2)));
    expect(decision.ok && decision.events[0]?.type === 'BillingRefunded' && decision.events[0].payload.reason).toBe('ATTEMPT_SUPERSEDED');
    expect(after.project?.balance).toBe(1_000);
    expect(after.latestAttempt).toBe(2);
  });

  it('refunds the superseded attempt before charging a newer one whose approval overtook the reopen, so the budget covers it', () => {
    // Budget for exactly one task: attempt 1 was billed, then task-svc reopened the task, and the
    // approval of attempt 2 reaches billing before the TaskReopened does.
    const billedOnce = completed(given(project(500)));
    const { decision, after } = run(billedOnce, bill(qaPassed(2, 'ann-2' as AnnotatorId)));

    expect(types(decision)).toEqual(['BillingRefunded', 'BillingCompleted']);
    expect(decision.ok && decision.events[0]).toMatchObject({ attempt: 1, payload: { reason: 'ATTEMPT_SUPERSEDED', amount: 500 } });
    expect(after.project?.balance).toBe(0);
    expect(after.billings.map((b) => [b.attempt, b.status])).toEqual([[1, 'refunded'], [2, 'completed']]);

    const late = run(after, observe(reopened(2)));
    expect(types(late.decision)).toEqual([]);
    expect(late.after.project?.balance).toBe(0);
  });
});

describe('billing-svc: the limits of an amount', () => {
  const MAX = Number.MAX_SAFE_INTEGER;
  const ann2 = 'ann-2' as AnnotatorId;
  /** The state with an annotator's payout balance as billing-svc loaded it. */
  const paid = (state: BillingTaskState, annotatorId: AnnotatorId, balance: number): BillingTaskState => ({ ...state, payouts: { ...state.payouts, [annotatorId]: balance } });
  const failure = (d: BillingDecision) => (d.ok ? d.events.find((e) => e.type === 'BillingFailed') : undefined);

  it('fails with PAYOUT_LIMIT_EXCEEDED and moves no money when crediting the annotator would pass the largest exact amount', () => {
    const state = paid(given(project(10_000)), ann, MAX - 499);
    const { decision, after } = run(state, bill());
    expect(types(decision)).toEqual(['BillingFailed']);
    expect(failure(decision)?.payload).toMatchObject({ annotatorId: ann, reason: 'PAYOUT_LIMIT_EXCEEDED', detail: expect.stringContaining(ann) });
    expect(after.project?.balance).toBe(10_000);
    expect(after.payouts[ann]).toBe(MAX - 499);
    expect(after.billings.map((b) => [b.status, b.reason])).toEqual([['failed', 'PAYOUT_LIMIT_EXCEEDED']]);
  });

  it('pays an annotator up to exactly the largest exact amount', () => {
    const { decision, after } = run(paid(given(project(10_000)), ann, MAX - 500), bill());
    expect(types(decision)).toEqual(['BillingCompleted']);
    expect(after.payouts[ann]).toBe(MAX);
  });

  it('tracks the payout it credits, so a later check of the same annotator counts it', () => {
    const billed = completed(paid(given(project(10_000)), ann, 100));
    expect(billed.payouts[ann]).toBe(600);
    expect(run(billed, observe(cancelled())).after.payouts[ann]).toBe(100);
  });

  it('checks the annotator of a newer attempt against their own payout, after reversing the superseded attempt', () => {
    const billedOnce = completed(paid(given(project(10_000)), ann, 0));
    const { decision, after } = run(paid(billedOnce, ann2, MAX - 1), bill(qaPassed(2, ann2)));
    expect(types(decision)).toEqual(['BillingRefunded', 'BillingFailed']);
    expect(failure(decision)?.payload.reason).toBe('PAYOUT_LIMIT_EXCEEDED');
    expect(after.payouts).toEqual({ [ann]: 0, [ann2]: MAX - 1 });
    expect(after.project?.balance).toBe(10_000);
  });

  it('counts the reversal of a superseded attempt before checking the limit of the same annotator reworking it', () => {
    // ann holds exactly the largest amount, 500 of it for attempt 1: the reversal makes room for attempt 2.
    const billedOnce = completed(paid(given(project(10_000)), ann, MAX - 500));
    expect(billedOnce.payouts[ann]).toBe(MAX);
    const { decision, after } = run(billedOnce, bill(qaPassed(2)));
    expect(types(decision)).toEqual(['BillingRefunded', 'BillingCompleted']);
    expect(after.payouts[ann]).toBe(MAX);
  });

  it('tells the admin who retries that the payout limit still stands, and changes nothing', () => {
    const failed = completed(paid(given(project(10_000)), ann, MAX - 1));
    expect(run(failed, retry())).toEqual({ decision: { ok: false, reason: expect.objectContaining({ code: 'PAYOUT_LIMIT_EXCEEDED' }) }, after: failed });
  });

  it('reports a short budget before the payout limit', () => {
    const { decision } = run(paid(given(project(100)), ann, MAX), bill());
    expect(failure(decision)?.payload.reason).toBe('INSUFFICIENT_BUDGET');
  });
});

describe('billing-svc: labels a model submitted (the machine rule)', () => {
  const model = 'model.cat-detector@2.1' as AnnotatorId;

  it('charges the machine price and moves no payout when the approved annotator is a model', () => {
    const { decision, after } = run(given(project(1_000, 500, 40)), bill(qaPassed(1, model)));
    expect(decision).toEqual({ ok: true, events: [{ ...envelope(1), type: 'BillingCompleted', payload: { annotatorId: model, amount: 40, approvedBy: 'rev-1' } }] });
    expect(after.project?.balance).toBe(960);
    expect(after.payouts[model]).toBeUndefined();
  });

  it('bills a model at a machine price of 0 without needing any budget', () => {
    const { decision } = run(given(project(0, 500, 0)), bill(qaPassed(1, model)));
    expect(decision.ok && decision.events[0]?.type === 'BillingCompleted' && decision.events[0].payload.amount).toBe(0);
  });

  it('fails with INSUFFICIENT_BUDGET when the budget does not cover the machine price', () => {
    const { decision } = run(given(project(39, 500, 40)), bill(qaPassed(1, model)));
    expect(decision.ok && decision.events[0]?.type === 'BillingFailed' && decision.events[0].payload.reason).toBe('INSUFFICIENT_BUDGET');
  });

  it('refunds the machine price on cancellation and still moves no payout', () => {
    const billed = completed(given(project(1_000, 500, 40)), bill(qaPassed(1, model)));
    const { decision, after } = run(billed, observe(cancelled()));
    expect(decision.ok && decision.events[0]?.type === 'BillingRefunded' && decision.events[0].payload.amount).toBe(40);
    expect(after.project?.balance).toBe(1_000);
    expect(after.payouts[model]).toBeUndefined();
  });

  it('pays a person the task price as before, even with a machine price set', () => {
    const { decision } = run(given(project(1_000, 500, 40)), bill());
    expect(decision.ok && decision.events[0]?.type === 'BillingCompleted' && decision.events[0].payload.amount).toBe(500);
  });
});
