import type { EventType } from '@labelflow/contracts';

/** How the timeline page shows an event: the saga moving on, a rejection, a failure, an undo, an end. */
export const EventKind = { step: 'step', rejection: 'rejection', failure: 'failure', compensation: 'compensation', outcome: 'outcome' } as const;
export type EventKind = (typeof EventKind)[keyof typeof EventKind];

const kinds: Readonly<Record<EventType, EventKind>> = {
  TaskCreated: EventKind.step,
  TaskAssigned: EventKind.step,
  LabelSubmitted: EventKind.step,
  QaStarted: EventKind.step,
  QaPassed: EventKind.step,
  BillingCompleted: EventKind.step,
  QaRejected: EventKind.rejection,
  QaTimedOut: EventKind.rejection,
  BillingFailed: EventKind.failure,
  TaskReopened: EventKind.compensation,
  BillingRefunded: EventKind.compensation,
  TaskCompleted: EventKind.outcome,
  TaskFailed: EventKind.outcome,
  TaskCancelled: EventKind.outcome,
};

export const kindOf = (type: EventType): EventKind => kinds[type];

type Payload = Readonly<Record<string, unknown>>;
const str = (v: unknown): string | undefined => (typeof v === 'string' || typeof v === 'number' ? String(v) : undefined);
const join = (...parts: (string | undefined | false)[]) => parts.filter((p): p is string => typeof p === 'string' && p !== '').join(', ');
const field = (name: string, v: unknown) => (str(v) === undefined ? undefined : `${name} ${str(v)}`);

/** One line of what an event says, for the timeline's details column. */
export function describe(type: EventType, payload: Payload): string {
  switch (type) {
    case 'TaskCreated':
      return join(str(payload.taskNumber), str(payload.title) && `"${str(payload.title)}"`, field('by', payload.createdBy));
    case 'TaskAssigned':
      return join(field('to', payload.annotatorId), field('lease until', payload.leaseExpiresAt));
    case 'TaskReopened':
      return join(str(payload.reason), field('after attempt', payload.previousAttempt), field('previous annotator', payload.previousAnnotatorId));
    case 'LabelSubmitted':
      return join(field('by', payload.annotatorId), Array.isArray(payload.annotations) ? `${payload.annotations.length} annotation(s)` : undefined);
    case 'QaStarted':
      return join(field('labels by', payload.annotatorId));
    case 'QaPassed':
      return join(field('approved by', payload.reviewerId));
    case 'QaRejected':
      return join(field('rejected by', payload.reviewerId), str(payload.reason) && `"${str(payload.reason)}"`);
    case 'QaTimedOut':
      return join(field('review due', payload.deadlineAt));
    case 'BillingCompleted':
      return join(field('amount', payload.amount), field('to', payload.annotatorId), field('approved by', payload.approvedBy));
    case 'BillingFailed':
      return join(str(payload.reason), str(payload.detail));
    case 'BillingRefunded':
      return join(str(payload.reason), field('amount', payload.amount), field('by', payload.refundedBy));
    case 'TaskCompleted':
      return join(field('annotator', payload.annotatorId));
    case 'TaskFailed':
      return join(str(payload.reason), str(payload.detail));
    case 'TaskCancelled':
      return join(str(payload.reason) && `"${str(payload.reason)}"`, field('by', payload.cancelledBy), field('was', payload.previousStatus));
    default: {
      const unhandled: never = type;
      return unhandled;
    }
  }
}

/** The trace id of a W3C `traceparent` (version-traceid-parentid-flags), or undefined. */
export function traceIdOf(traceparent: string | undefined): string | undefined {
  const match = traceparent === undefined ? null : /^[0-9a-f]{2}-([0-9a-f]{32})-[0-9a-f]{16}-[0-9a-f]{2}$/.exec(traceparent.trim());
  const id = match?.[1];
  return id === undefined || /^0+$/.test(id) ? undefined : id;
}

/**
 * Events in time order, except that none comes before the event that caused it. Time is each
 * producer's clock: with skew between hosts an effect can carry an earlier `occurredAt` than its
 * cause, and the causation id says which came first. An event waits, in its order among the
 * others, until its cause has been placed (when the cause is in the list at all).
 */
export function causalOrder<E>(byTime: readonly E[], idOf: (e: E) => string, causeOf: (e: E) => string | null): E[] {
  const present = new Set(byTime.map(idOf));
  const placed = new Set<string>();
  const waiting = new Map<string, E[]>();
  const out: E[] = [];
  const place = (e: E): void => {
    out.push(e);
    placed.add(idOf(e));
    const effects = waiting.get(idOf(e));
    if (!effects) return;
    waiting.delete(idOf(e));
    for (const effect of effects) place(effect);
  };
  for (const e of byTime) {
    const cause = causeOf(e);
    if (cause !== null && cause !== idOf(e) && present.has(cause) && !placed.has(cause)) waiting.set(cause, [...(waiting.get(cause) ?? []), e]);
    else place(e);
  }
  // Only a loop of causes (which no producer writes) leaves events waiting: they go last, in time order.
  const left = new Set([...waiting.values()].flat());
  for (const e of byTime) if (left.has(e)) out.push(e);
  return out;
}
