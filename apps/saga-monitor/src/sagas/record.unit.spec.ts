import { describe, expect, it } from 'vitest';
import { TopicSchemas, type DomainEvent, type EventType } from '@labelflow/contracts';
import { advanceRow, dismissRecord, observeEvent, sweepRecord, type SagaRecord } from './record';
import { emptyWatchState } from './state';

const t0 = Date.parse('2030-01-01T00:00:00.000Z');
const at = (ms: number) => new Date(t0 + ms).toISOString();
const taskId = '7000000000000000001';
const projectId = '22222222-2222-4222-8222-222222222222';
let nextId = 1;

const payloads: Partial<Record<EventType, Record<string, unknown>>> = {
  TaskCreated: { title: 'cat?', dataUri: 's3://b/1.jpg', taskNumber: 'PRJ-7' },
  LabelSubmitted: { annotatorId: 'ann', annotations: [{ label: 'cat', confidence: 0.9 }] },
  QaStarted: { annotatorId: 'ann' },
  QaPassed: { annotatorId: 'ann', reviewerId: 'rev' },
  BillingCompleted: { annotatorId: 'ann', amount: 300 },
  TaskCompleted: { annotatorId: 'ann' },
  TaskCancelled: { reason: 'no longer needed', cancelledBy: 'admin', previousStatus: 'open' },
};
const producers = { Task: 'task-svc', Label: 'label-svc', Qa: 'qa-svc', Billing: 'billing-svc' } as const;
const topics = { Task: 'task', Label: 'label', Qa: 'qa', Billing: 'billing' } as const;

/** A well-formed event, as a producer would publish it. */
function event(type: EventType, ms: number, attempt = 1): DomainEvent {
  const prefix = (Object.keys(producers) as (keyof typeof producers)[]).find((p) => type.startsWith(p))!;
  return TopicSchemas[topics[prefix]].parse({ id: String(nextId++), type, version: 1, taskId, projectId, attempt, occurredAt: at(ms), producer: producers[prefix], payload: payloads[type] }) as DomainEvent;
}

const fresh = (first: DomainEvent): SagaRecord => ({
  row: { taskId, projectId, taskNumber: null, title: null, attempt: first.attempt, lastEventType: first.type, outcome: null, firstEventAt: first.occurredAt, lastEventAt: first.occurredAt, events: 0 },
  watch: emptyWatchState,
  recorded: [],
  notices: [],
});
const deadlines = { qa_started: 5_000, billing: 5_000, completion: 5_000, rework: 5_000, failure: 5_000, refund: 5_000 };
const observeAll = (events: DomainEvent[]) => events.reduce((r, e) => observeEvent(r, e, { deadlines, consumedAt: at(99_999), traceId: 'abc' }), fresh(events[0]!));

describe('saga record: what one consumed event changes', () => {
  it('keeps the task number, title and the latest event, whatever order the topics deliver in', () => {
    const record = observeAll([event('QaStarted', 2_000), event('TaskCreated', 0), event('LabelSubmitted', 1_000)]);
    expect(record.row).toMatchObject({ taskNumber: 'PRJ-7', title: 'cat?', lastEventType: 'QaStarted', firstEventAt: at(0), lastEventAt: at(2_000), events: 3 });
    expect(record.recorded.map((e) => [e.type, e.traceId, e.consumedAt])).toEqual([['QaStarted', 'abc', at(99_999)], ['TaskCreated', 'abc', at(99_999)], ['LabelSubmitted', 'abc', at(99_999)]]);
  });

  it('leaves a latency notice for each timed step and an outcome notice at the end', () => {
    const record = observeAll([event('QaPassed', 0), event('BillingCompleted', 1_500), event('TaskCompleted', 2_000)]);
    expect(record.notices).toEqual([
      { kind: 'latency', body: { from: 'decided', to: 'billed', seconds: 1.5 } },
      { kind: 'latency', body: { from: 'billed', to: 'completed', seconds: 0.5 } },
      { kind: 'outcome', body: { outcome: 'completed', taskId } },
    ]);
    expect(record.row.outcome).toBe('completed');
  });

  it('leaves an alert notice when a step is overdue, and a resolved notice when it arrives', () => {
    const waiting = observeAll([event('LabelSubmitted', 0)]);
    const swept = sweepRecord(waiting, at(6_000));
    expect(swept.ok).toBe(true);
    const alerting = swept.ok ? swept.state : waiting;
    expect(alerting.notices.at(-1)).toEqual({ kind: 'alert', body: { taskId, projectId, taskNumber: null, step: 'qa_started', attempt: 1, since: at(0), dueAt: at(5_000), at: at(6_000) } });
    const resolved = observeEvent(alerting, event('QaStarted', 7_000), { deadlines, consumedAt: at(7_001), traceId: null });
    expect(resolved.notices.filter((n) => n.kind === 'resolved')).toEqual([
      { kind: 'resolved', body: { taskId, projectId, taskNumber: null, step: 'qa_started', attempt: 1, since: at(0), dueAt: at(5_000), alertedAt: at(6_000), at: at(7_000), cause: 'arrived' } },
    ]);
  });

  it('leaves a resolved notice naming who dismissed an alert, and refuses one not alerting', () => {
    const waiting = observeAll([event('LabelSubmitted', 0)]);
    expect(dismissRecord(waiting, 'qa_started', 1, at(5_500), 'ops-1')).toMatchObject({ ok: false, reason: { code: 'WATCH_NOT_ALERTING' } });
    const swept = sweepRecord(waiting, at(6_000));
    const alerting = swept.ok ? swept.state : waiting;
    const dismissed = dismissRecord(alerting, 'qa_started', 1, at(9_000), 'ops-1');
    expect(dismissed.ok && dismissed.state.notices.at(-1)).toEqual({
      kind: 'resolved',
      body: { taskId, projectId, taskNumber: null, step: 'qa_started', attempt: 1, since: at(0), dueAt: at(5_000), alertedAt: at(6_000), at: at(9_000), cause: 'dismissed', dismissedBy: 'ops-1' },
    });
  });

  it('keeps a cancellation as the outcome', () => {
    const row = advanceRow(observeAll([event('TaskCancelled', 0)]).row, event('TaskCompleted', 1_000));
    expect(row.outcome).toBe('cancelled');
  });
});
