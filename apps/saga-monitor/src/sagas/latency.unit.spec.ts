import { describe, expect, it } from 'vitest';
import type { EventType } from '@labelflow/contracts';
import { legsCompleted, outcomeOf } from './latency';

const t0 = Date.parse('2030-01-01T00:00:00.000Z');
const at = (ms: number) => new Date(t0 + ms).toISOString();
const fact = (type: EventType, attempt: number, ms: number) => ({ type, attempt, occurredAt: at(ms) });

describe('saga step latencies', () => {
  it('times a step when its second end arrives', () => {
    expect(legsCompleted({ 'LabelSubmitted#1': at(0) }, fact('QaStarted', 1, 250))).toEqual([{ from: 'labelled', to: 'qa_started', seconds: 0.25 }]);
  });

  it('times a step whose end was consumed before its start (events travel on four topics)', () => {
    expect(legsCompleted({ 'QaStarted#1': at(250) }, fact('LabelSubmitted', 1, 0))).toEqual([{ from: 'labelled', to: 'qa_started', seconds: 0.25 }]);
  });

  it('times nothing across attempts', () => {
    expect(legsCompleted({ 'LabelSubmitted#1': at(0) }, fact('QaStarted', 2, 250))).toEqual([]);
  });

  it('starts a reworked attempt at its reopen and the first one at the creation', () => {
    expect(legsCompleted({ 'TaskCreated#1': at(0) }, fact('TaskAssigned', 1, 1_000))).toEqual([{ from: 'created', to: 'assigned', seconds: 1 }]);
    expect(legsCompleted({ 'TaskCreated#1': at(0), 'TaskReopened#2': at(5_000) }, fact('TaskAssigned', 2, 7_000))).toEqual([{ from: 'reopened', to: 'assigned', seconds: 2 }]);
  });

  it('times the billing of an attempt once, by its first outcome, when a failed billing is retried', () => {
    const seen = { 'QaPassed#1': at(0), 'BillingFailed#1': at(100) };
    expect(legsCompleted(seen, fact('BillingCompleted', 1, 60_000))).toEqual([]);
  });

  it('counts both ends a middle event closes and opens', () => {
    const seen = { 'QaStarted#1': at(0), 'BillingCompleted#1': at(3_000) };
    expect(legsCompleted(seen, fact('QaPassed', 1, 1_000))).toEqual([
      { from: 'qa_started', to: 'decided', seconds: 1 },
      { from: 'decided', to: 'billed', seconds: 2 },
    ]);
  });

  it('never reports a negative time when producers disagree about the clock', () => {
    expect(legsCompleted({ 'LabelSubmitted#1': at(500) }, fact('QaStarted', 1, 0))).toEqual([{ from: 'labelled', to: 'qa_started', seconds: 0 }]);
  });

  it('names the outcome of the three terminal events and of no other', () => {
    expect([outcomeOf('TaskCompleted'), outcomeOf('TaskFailed'), outcomeOf('TaskCancelled'), outcomeOf('BillingFailed')]).toEqual(['completed', 'failed', 'cancelled', undefined]);
  });
});
