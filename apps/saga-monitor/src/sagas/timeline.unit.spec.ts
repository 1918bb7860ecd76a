import { describe, expect, it } from 'vitest';
import { causalOrder, describe as describeEvent, kindOf, traceIdOf } from './timeline';

describe('saga timeline: how events read', () => {
  it('shows a rejection with its reviewer and reason', () => {
    expect(describeEvent('QaRejected', { annotatorId: 'ann', reviewerId: 'rev-1', reason: 'blurry' })).toBe('rejected by rev-1, "blurry"');
    expect(kindOf('QaRejected')).toBe('rejection');
  });

  it('shows a billing failure with its reason and detail, as a failure', () => {
    expect(describeEvent('BillingFailed', { annotatorId: 'ann', reason: 'INJECTED_FAILURE', detail: 'fault injection' })).toBe('INJECTED_FAILURE, fault injection');
    expect(kindOf('BillingFailed')).toBe('failure');
  });

  it('shows a reopen as a compensation naming why and the attempt before', () => {
    expect(describeEvent('TaskReopened', { reason: 'QA_REJECTED', previousAttempt: 1, previousAnnotatorId: null })).toBe('QA_REJECTED, after attempt 1');
    expect(kindOf('TaskReopened')).toBe('compensation');
    expect(kindOf('BillingRefunded')).toBe('compensation');
  });

  it('leaves out what an older event does not carry', () => {
    expect(describeEvent('TaskCreated', { title: 'cat?', dataUri: 's3://b/1.jpg' })).toBe('"cat?"');
  });

  it('reads the trace id of a W3C traceparent and nothing else', () => {
    expect(traceIdOf('00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01')).toBe('4bf92f3577b34da6a3ce929d0e0e4736');
    expect(traceIdOf('00-00000000000000000000000000000000-00f067aa0ba902b7-01')).toBeUndefined();
    expect(traceIdOf('garbage')).toBeUndefined();
    expect(traceIdOf(undefined)).toBeUndefined();
  });
});

describe('saga timeline: the order events are listed in', () => {
  const ev = (id: string, cause: string | null = null) => ({ id, cause });
  const order = (events: { id: string; cause: string | null }[]) => causalOrder(events, (e) => e.id, (e) => e.cause).map((e) => e.id);

  it('keeps time order when every event comes after its cause', () => {
    expect(order([ev('a'), ev('b', 'a'), ev('c', 'b'), ev('d')])).toEqual(['a', 'b', 'c', 'd']);
  });

  it('lists an effect stamped before its cause by a skewed clock right after the cause, its own effects with it', () => {
    // TaskCompleted (t) carries an earlier occurredAt than the BillingCompleted (b) that caused it.
    expect(order([ev('q'), ev('t', 'b'), ev('x'), ev('b', 'q'), ev('y')])).toEqual(['q', 'x', 'b', 't', 'y']);
    expect(order([ev('t2', 't'), ev('t', 'b'), ev('b')])).toEqual(['b', 't', 't2']);
  });

  it('ignores causes outside the saga (an Idempotency-Key, a sweeper) and loops no producer writes', () => {
    expect(order([ev('a', 'idem-key-1'), ev('b', 'deadline:qa-timeouts:1')])).toEqual(['a', 'b']);
    expect(order([ev('a', 'b'), ev('b', 'a'), ev('c')])).toEqual(['c', 'a', 'b']);
  });
});
