import type { DomainEvent, EventType } from '@labelflow/contracts';
import { fold, type Executed } from '@labelflow/service-kit';
import { decide, type WatchDecidedEvent, type WatchRejection } from './decide';
import { legsCompleted, outcomeOf, type Outcome } from './latency';
import { evolve, type Fact, type SagaWatchState, type StepDeadlines, type WatchedStep, type WatchEvent } from './state';

const decider = { decide, evolve };

/** The saga's summary row: what the search and the alert list show without reading its events. */
export interface SagaRow {
  readonly taskId: string;
  readonly projectId: string;
  readonly taskNumber: string | null;
  readonly title: string | null;
  /** The newest attempt any event named. */
  readonly attempt: number;
  /** The type of the latest event by occurrence: where the saga stands. */
  readonly lastEventType: string;
  readonly outcome: Outcome | null;
  readonly firstEventAt: string;
  readonly lastEventAt: string;
  readonly events: number;
}

/** One consumed event as the timeline keeps it. */
export interface RecordedEvent {
  readonly eventId: string;
  readonly taskId: string;
  readonly projectId: string;
  readonly type: EventType;
  readonly version: number;
  readonly attempt: number;
  readonly producer: string;
  readonly occurredAt: string;
  readonly consumedAt: string;
  readonly traceId: string | null;
  readonly causationId: string | null;
  readonly payload: unknown;
}

export const NoticeKind = { alert: 'alert', resolved: 'resolved', latency: 'latency', outcome: 'outcome' } as const;
export type NoticeKind = (typeof NoticeKind)[keyof typeof NoticeKind];

/**
 * What a commit leaves for the metrics, the log and the webhook. Written in the same transaction
 * as the change that caused it and turned into effects only after that commit (notices.ts), so a
 * batch the consumer retries never counts twice.
 */
export interface Notice {
  readonly kind: NoticeKind;
  readonly body: Readonly<Record<string, unknown>>;
}

/** A task's state in the monitor: its row, the watchdog's state, and what this batch adds. */
export interface SagaRecord {
  readonly row: SagaRow;
  readonly watch: SagaWatchState;
  /** Events consumed in this batch, to insert. */
  readonly recorded: readonly RecordedEvent[];
  /** Notices of this batch, to insert. */
  readonly notices: readonly Notice[];
}

const later = (a: string, b: string) => new Date(a).getTime() >= new Date(b).getTime();

/** The row after one more event; events of one task arrive in no fixed order across its four topics. */
export function advanceRow(row: SagaRow, event: DomainEvent): SagaRow {
  const created = event.type === 'TaskCreated' ? event.payload : undefined;
  const outcome = outcomeOf(event.type);
  const latest = later(event.occurredAt, row.lastEventAt);
  return {
    ...row,
    taskNumber: created?.taskNumber ?? row.taskNumber,
    title: created?.title ?? row.title,
    attempt: Math.max(row.attempt, event.attempt),
    lastEventType: latest ? event.type : row.lastEventType,
    lastEventAt: latest ? event.occurredAt : row.lastEventAt,
    firstEventAt: later(row.firstEventAt, event.occurredAt) ? event.occurredAt : row.firstEventAt,
    // A cancellation is final; a failed task may still complete (a billing retry).
    outcome: row.outcome === 'cancelled' ? row.outcome : (outcome ?? row.outcome),
    events: row.events + 1,
  };
}

/** The alert notices of the watchdog's decisions: a raised alert, and the end of one that was raised. */
export function alertNotices(events: readonly WatchEvent[], row: SagaRow): Notice[] {
  const saga = { taskId: row.taskId, projectId: row.projectId, taskNumber: row.taskNumber };
  return events.flatMap((e): Notice[] => {
    if (e.type === 'AlertRaised') return [{ kind: NoticeKind.alert, body: { ...saga, step: e.step, attempt: e.attempt, since: e.since, dueAt: e.dueAt, at: e.at } }];
    if (e.type === 'WatchClosed' && e.alertedAt !== null) {
      return [{ kind: NoticeKind.resolved, body: { ...saga, step: e.step, attempt: e.attempt, since: e.since, dueAt: e.dueAt, alertedAt: e.alertedAt, at: e.at, cause: e.cause, ...(e.by === undefined ? {} : { dismissedBy: e.by }) } }];
    }
    return [];
  });
}

export interface Observation {
  readonly deadlines: StepDeadlines;
  /** When the monitor consumed it. */
  readonly consumedAt: string;
  /** When it reached its topic (its Kafka timestamp): a step's deadline runs from then if that is later than it happened. */
  readonly publishedAt?: string;
  /** The trace the event travelled in (from its Kafka headers). */
  readonly traceId: string | null;
}

/** One consumed event folded into the task's record: timeline, row, watches, and the notices they cause. */
export function observeEvent(record: SagaRecord, event: DomainEvent, { deadlines, consumedAt, publishedAt, traceId }: Observation): SagaRecord {
  const fact: Fact = { type: event.type, attempt: event.attempt, occurredAt: event.occurredAt };
  const result = fold(decider, record.watch, { type: 'Observe', fact, deadlines, ...(publishedAt === undefined ? {} : { publishedAt }) }, [{ type: 'FactObserved', fact }]);
  // Observe is never refused: a saga can always be told what happened to it.
  const decided = result.ok ? result.events : [];
  const watch = result.ok ? result.state : record.watch;
  const outcome = outcomeOf(event.type);
  const notices: Notice[] = [
    ...alertNotices(decided, record.row),
    ...legsCompleted(record.watch.seen, fact).map((leg) => ({ kind: NoticeKind.latency, body: { ...leg } })),
    ...(outcome ? [{ kind: NoticeKind.outcome, body: { outcome, taskId: event.taskId } }] : []),
  ];
  const recorded: RecordedEvent = {
    eventId: event.id,
    taskId: event.taskId,
    projectId: event.projectId,
    type: event.type,
    version: event.version,
    attempt: event.attempt,
    producer: event.producer,
    occurredAt: event.occurredAt,
    consumedAt,
    traceId,
    causationId: event.causationId ?? null,
    payload: event.payload,
  };
  return { row: advanceRow(record.row, event), watch, recorded: [...record.recorded, recorded], notices: [...record.notices, ...notices] };
}

/** The sweeper's clock reached `now`: the task's overdue steps alert. */
/** A platform admin dismissed one of the task's alerting watches: it closes, and its alert resolves. */
export function dismissRecord(record: SagaRecord, step: WatchedStep, attempt: number, at: string, by: string): Executed<SagaRecord, WatchDecidedEvent, WatchRejection> {
  const result = fold(decider, record.watch, { type: 'Dismiss', step, attempt, at, by });
  if (!result.ok) return result;
  return { ok: true, state: { ...record, watch: result.state, notices: [...record.notices, ...alertNotices(result.events, record.row)] }, events: result.events };
}

export function sweepRecord(record: SagaRecord, now: string): Executed<SagaRecord, WatchDecidedEvent, WatchRejection> {
  const result = fold(decider, record.watch, { type: 'Sweep', now });
  if (!result.ok) return result;
  return { ok: true, state: { ...record, watch: result.state, notices: [...record.notices, ...alertNotices(result.events, record.row)] }, events: result.events };
}
