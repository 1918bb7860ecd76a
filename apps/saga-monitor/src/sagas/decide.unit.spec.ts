import { describe, expect, it } from 'vitest';
import type { EventType } from '@labelflow/contracts';
import { deciderSpec } from '@labelflow/testing';
import { decide, type WatchCommand } from './decide';
import { emptyWatchState, evolve, type Fact, type SagaWatchState, type StepDeadlines, type WatchEvent } from './state';

const t0 = Date.parse('2030-01-01T00:00:00.000Z');
const at = (ms: number) => new Date(t0 + ms).toISOString();
const deadlines: StepDeadlines = { qa_started: 5_000, billing: 5_000, completion: 5_000, rework: 5_000, failure: 5_000, refund: 5_000 };

const fact = (type: EventType, attempt = 1, ms = 0): Fact => ({ type, attempt, occurredAt: at(ms) });
const seen = (type: EventType, attempt = 1, ms = 0): WatchEvent => ({ type: 'FactObserved', fact: fact(type, attempt, ms) });
const observe = (type: EventType, attempt = 1, ms = 0): WatchCommand => ({ type: 'Observe', fact: fact(type, attempt, ms), deadlines });
const sweep = (ms: number): WatchCommand => ({ type: 'Sweep', now: at(ms) });

const spec = deciderSpec({ decide, evolve }, { initial: () => emptyWatchState, observed: (c) => (c.type === 'Observe' ? [{ type: 'FactObserved' as const, fact: c.fact }] : []) });
const { given, when } = spec;

/** Runs commands one after another, as the consumer and the sweeper would. */
const run = (state: SagaWatchState, ...commands: WatchCommand[]) => commands.reduce((s, c) => when(s, c).state, state);

describe('saga watchdog: which steps it waits for', () => {
  it('waits for QaStarted once labels are submitted, due 5 s after the labels', () => {
    const { decision, state } = when(given(), observe('LabelSubmitted', 1, 100));
    expect(decision).toEqual({ ok: true, events: [{ type: 'WatchOpened', step: 'qa_started', attempt: 1, since: at(100), dueAt: at(5_100) }] });
    expect(state.watches).toEqual([{ step: 'qa_started', attempt: 1, since: at(100), dueAt: at(5_100), alertedAt: null }]);
  });

  it('runs a deadline from when the event reached its topic when its relay published it late, so the next service is not blamed for the lag', () => {
    const late = when(given(), { type: 'Observe', fact: fact('LabelSubmitted', 1, 0), deadlines, publishedAt: at(7_000) });
    expect(late.decision).toEqual({ ok: true, events: [{ type: 'WatchOpened', step: 'qa_started', attempt: 1, since: at(0), dueAt: at(12_000) }] });
    expect(when(late.state, sweep(7_100)).decision).toMatchObject({ ok: false, reason: { code: 'NOTHING_DUE' } });
    // Published before it happened by the producer's clock (skew between hosts): it happened counts.
    const early = when(given(), { type: 'Observe', fact: fact('LabelSubmitted', 1, 1_000), deadlines, publishedAt: at(900) });
    expect(early.decision).toMatchObject({ ok: true, events: [{ dueAt: at(6_000) }] });
  });

  it('takes each step deadline from the command, so every step can have its own', () => {
    const { decision } = when(given(), { type: 'Observe', fact: fact('QaPassed', 2, 0), deadlines: { ...deadlines, billing: 1_500 } });
    expect(decision).toEqual({ ok: true, events: [{ type: 'WatchOpened', step: 'billing', attempt: 2, since: at(0), dueAt: at(1_500) }] });
  });

  it('stops waiting when the awaited event of the same attempt arrives, and says the watch was not alerting', () => {
    const waiting = run(given(), observe('LabelSubmitted', 1, 0));
    const { decision, state } = when(waiting, observe('QaStarted', 1, 300));
    expect(decision).toEqual({ ok: true, events: [{ type: 'WatchClosed', step: 'qa_started', attempt: 1, cause: 'arrived', at: at(300), since: at(0), dueAt: at(5_000), alertedAt: null }] });
    expect(state.watches).toEqual([]);
  });

  it('keeps waiting when the awaited event names another attempt', () => {
    const waiting = run(given(), observe('LabelSubmitted', 2, 0));
    expect(when(waiting, observe('QaStarted', 1, 300)).state.watches).toHaveLength(1);
  });

  it('waits for nothing when the awaited event was consumed first from its own topic', () => {
    const { decision } = when(given(seen('QaStarted', 1, 50)), observe('LabelSubmitted', 1, 0));
    expect(decision).toEqual({ ok: true, events: [] });
  });

  it('accepts either billing outcome after an approval, and then waits for the task to complete, or to fail after a BillingFailed', () => {
    const approved = run(given(), observe('QaPassed', 1, 0));
    const failed = when(approved, observe('BillingFailed', 1, 200));
    expect(failed.decision).toEqual({
      ok: true,
      events: [expect.objectContaining({ type: 'WatchClosed', step: 'billing', cause: 'arrived' }), { type: 'WatchOpened', step: 'failure', attempt: 1, since: at(200), dueAt: at(5_200) }],
    });
    expect(when(failed.state, observe('TaskFailed', 1, 300)).decision).toEqual({ ok: true, events: [expect.objectContaining({ type: 'WatchClosed', step: 'failure', cause: 'arrived' })] });

    const billed = when(approved, observe('BillingCompleted', 1, 200));
    expect(billed.decision).toEqual({
      ok: true,
      events: [expect.objectContaining({ type: 'WatchClosed', step: 'billing', cause: 'arrived' }), { type: 'WatchOpened', step: 'completion', attempt: 1, since: at(200), dueAt: at(5_200) }],
    });
    expect(when(billed.state, observe('TaskCompleted', 1, 400)).state.watches).toEqual([]);
  });

  it('waits again for completion when a failed billing is retried and goes through', () => {
    const failed = run(given(), observe('QaPassed', 1, 0), observe('BillingFailed', 1, 100), observe('TaskFailed', 1, 150));
    expect(when(failed, observe('BillingCompleted', 1, 60_000)).state.watches).toEqual([{ step: 'completion', attempt: 1, since: at(60_000), dueAt: at(65_000), alertedAt: null }]);
  });

  it.each(['QaRejected', 'QaTimedOut'] as const)('waits after %s for task-svc to reopen the task on the next attempt, and alerts when it does not', (verdict) => {
    const { decision, state } = when(given(), observe(verdict, 1, 100));
    expect(decision).toEqual({ ok: true, events: [{ type: 'WatchOpened', step: 'rework', attempt: 1, since: at(100), dueAt: at(5_100) }] });
    expect(when(state, observe('TaskReopened', 2, 300)).decision).toEqual({ ok: true, events: [expect.objectContaining({ type: 'WatchClosed', step: 'rework', attempt: 1, cause: 'arrived' })] });
    expect(when(state, sweep(5_100)).decision).toEqual({ ok: true, events: [expect.objectContaining({ type: 'AlertRaised', step: 'rework', attempt: 1 })] });
  });

  it('opens no rework watch when the reopen was consumed first, or the verdict is of an attempt already reworked', () => {
    expect(when(given(seen('TaskReopened', 2, 300)), observe('QaRejected', 1, 100)).decision).toEqual({ ok: true, events: [] });
    expect(when(given(seen('TaskReopened', 3, 300)), observe('QaTimedOut', 1, 100)).decision).toEqual({ ok: true, events: [] });
  });

  it('stops waiting for a failure when a billing retry completed the task first', () => {
    const failed = run(given(), observe('BillingFailed', 1, 0));
    expect(when(failed, observe('TaskCompleted', 1, 400)).decision).toEqual({ ok: true, events: [expect.objectContaining({ type: 'WatchClosed', step: 'failure', cause: 'arrived' })] });
  });

  it('stops waiting for a reworked attempt and ignores late steps of it', () => {
    const waiting = run(given(), observe('QaPassed', 1, 0));
    const reopened = when(waiting, observe('TaskReopened', 2, 100));
    expect(reopened.decision).toEqual({ ok: true, events: [expect.objectContaining({ type: 'WatchClosed', step: 'billing', attempt: 1, cause: 'superseded' })] });
    expect(when(reopened.state, observe('LabelSubmitted', 1, 200)).decision).toEqual({ ok: true, events: [] });
    expect(when(reopened.state, observe('LabelSubmitted', 2, 200)).state.watches).toEqual([expect.objectContaining({ step: 'qa_started', attempt: 2 })]);
  });

  it('stops waiting for anything once the task is cancelled, then and later', () => {
    const waiting = run(given(), observe('LabelSubmitted', 1, 0));
    const cancelled = when(waiting, observe('TaskCancelled', 1, 100));
    expect(cancelled.decision).toEqual({ ok: true, events: [expect.objectContaining({ type: 'WatchClosed', step: 'qa_started', cause: 'cancelled' })] });
    expect(when(cancelled.state, observe('QaPassed', 1, 200)).decision).toEqual({ ok: true, events: [] });
    expect(cancelled.state.cancelled).toBe(true);
  });

  it('waits after a cancel for billing-svc to refund each billed attempt not yet refunded, and nothing else', () => {
    const billed = run(given(), observe('QaPassed', 1, 0), observe('BillingCompleted', 1, 100), observe('TaskCompleted', 1, 200));
    const cancelled = when(billed, observe('TaskCancelled', 1, 1_000));
    expect(cancelled.decision).toEqual({ ok: true, events: [{ type: 'WatchOpened', step: 'refund', attempt: 1, since: at(1_000), dueAt: at(6_000) }] });
    expect(when(cancelled.state, sweep(6_000)).decision).toEqual({ ok: true, events: [expect.objectContaining({ type: 'AlertRaised', step: 'refund', attempt: 1 })] });
    expect(when(cancelled.state, observe('BillingRefunded', 1, 1_200)).decision).toEqual({ ok: true, events: [expect.objectContaining({ type: 'WatchClosed', step: 'refund', attempt: 1, cause: 'arrived' })] });
    // A cancel before any billing owes nothing; nor does one whose refund was read first.
    expect(when(run(given(), observe('QaPassed', 1, 0)), observe('TaskCancelled', 1, 50)).state.watches).toEqual([]);
    expect(when(run(billed, observe('BillingRefunded', 1, 300)), observe('TaskCancelled', 1, 400)).decision).toEqual({ ok: true, events: [] });
  });

  it('waits for the refund when the billing of a cancelled task is read after the cancel', () => {
    const cancelled = run(given(), observe('QaPassed', 1, 0), observe('TaskCancelled', 1, 50));
    const billed = when(cancelled, observe('BillingCompleted', 1, 40));
    expect(billed.decision).toEqual({ ok: true, events: [{ type: 'WatchOpened', step: 'refund', attempt: 1, since: at(40), dueAt: at(5_040) }] });
  });

  it('waits for the refund of a billed attempt that a reopen superseded, and not for a later attempt', () => {
    const billed = run(given(), observe('QaPassed', 1, 0), observe('BillingCompleted', 1, 100));
    const reopened = when(billed, observe('TaskReopened', 2, 150));
    expect(reopened.decision).toEqual({
      ok: true,
      events: [expect.objectContaining({ type: 'WatchClosed', step: 'completion', attempt: 1, cause: 'superseded' }), { type: 'WatchOpened', step: 'refund', attempt: 1, since: at(150), dueAt: at(5_150) }],
    });
    // Billing of the new attempt owes nothing back; the old one is still awaited.
    const rebilled = run(reopened.state, observe('QaPassed', 2, 300), observe('BillingCompleted', 2, 400));
    expect(rebilled.watches.filter((w) => w.step === 'refund')).toEqual([expect.objectContaining({ attempt: 1 })]);
    // A reopen read after its billing was refunded waits for nothing.
    expect(when(run(billed, observe('BillingRefunded', 1, 120)), observe('TaskReopened', 2, 150)).state.watches.filter((w) => w.step === 'refund')).toEqual([]);
  });

  it('keeps waiting for a refund through a later reopen or cancel of the same task', () => {
    const owed = run(given(), observe('BillingCompleted', 1, 0), observe('TaskReopened', 2, 100));
    const cancelled = when(owed, observe('TaskCancelled', 2, 200));
    expect(cancelled.decision).toEqual({ ok: true, events: [] });
    expect(cancelled.state.watches).toEqual([expect.objectContaining({ step: 'refund', attempt: 1, since: at(100) })]);
    expect(when(cancelled.state, observe('BillingRefunded', 1, 300)).state.watches).toEqual([]);
  });

  it('opens one watch per step and attempt however often its start is observed', () => {
    const waiting = run(given(), observe('LabelSubmitted', 1, 0));
    expect(when(waiting, observe('LabelSubmitted', 1, 10)).decision).toEqual({ ok: true, events: [] });
  });

  it('remembers the first time each event type of an attempt was seen', () => {
    const state = run(given(), observe('LabelSubmitted', 1, 0), observe('LabelSubmitted', 1, 999));
    expect(state.seen).toEqual({ 'LabelSubmitted#1': at(0) });
  });
});

describe('saga watchdog: alerts', () => {
  const waiting = run(given(), observe('LabelSubmitted', 1, 0));

  it('raises nothing before the deadline', () => {
    expect(when(waiting, sweep(4_999)).rejection).toBe('NOTHING_DUE');
  });

  it('raises an alert for a step past its deadline, once', () => {
    const { decision, state } = when(waiting, sweep(5_000));
    expect(decision).toEqual({ ok: true, events: [{ type: 'AlertRaised', step: 'qa_started', attempt: 1, since: at(0), dueAt: at(5_000), at: at(5_000) }] });
    expect(state.watches).toEqual([{ step: 'qa_started', attempt: 1, since: at(0), dueAt: at(5_000), alertedAt: at(5_000) }]);
    expect(when(state, sweep(9_000)).rejection).toBe('NOTHING_DUE');
  });

  it('resolves the alert when the awaited step finally arrives, with when it was raised', () => {
    const alerting = run(waiting, sweep(6_000));
    const { decision, state } = when(alerting, observe('QaStarted', 1, 8_000));
    expect(decision).toEqual({ ok: true, events: [{ type: 'WatchClosed', step: 'qa_started', attempt: 1, cause: 'arrived', at: at(8_000), since: at(0), dueAt: at(5_000), alertedAt: at(6_000) }] });
    expect(state.watches).toEqual([]);
  });

  it('alerts each overdue step of a task and leaves the ones still on time', () => {
    const two = run(given(), observe('LabelSubmitted', 1, 0), { type: 'Observe', fact: fact('QaPassed', 1, 0), deadlines: { ...deadlines, billing: 60_000 } });
    const { decision } = when(two, sweep(10_000));
    expect(decision).toEqual({ ok: true, events: [expect.objectContaining({ type: 'AlertRaised', step: 'qa_started' })] });
  });
});

describe('saga watchdog: dismissing an alert', () => {
  const waiting = run(given(), observe('LabelSubmitted', 1, 0));
  const dismiss = (attempt = 1, ms = 9_000): WatchCommand => ({ type: 'Dismiss', step: 'qa_started', attempt, at: at(ms), by: 'ops-1' });

  it('closes an alerting watch as dismissed, with when it was raised, so its alert resolves', () => {
    const alerting = run(waiting, sweep(6_000));
    const { decision, state } = when(alerting, dismiss());
    expect(decision).toEqual({ ok: true, events: [{ type: 'WatchClosed', step: 'qa_started', attempt: 1, cause: 'dismissed', at: at(9_000), since: at(0), dueAt: at(5_000), alertedAt: at(6_000), by: 'ops-1' }] });
    expect(state.watches).toEqual([]);
    // The event arriving after all opens nothing again for the dismissed step.
    expect(when(state, observe('QaStarted', 1, 10_000)).decision).toEqual({ ok: true, events: [] });
  });

  it('refuses a watch that is not alerting yet, and one that is not open', () => {
    expect(when(waiting, dismiss()).rejection).toBe('WATCH_NOT_ALERTING');
    expect(when(run(waiting, sweep(6_000)), dismiss(2)).rejection).toBe('WATCH_NOT_FOUND');
    expect(when(given(), dismiss()).rejection).toBe('WATCH_NOT_FOUND');
  });
});
