import type { EventType } from '@labelflow/contracts';
import { seenKey } from './state';

/**
 * The saga's steps as the latency histograms name them: created → assigned → labelled →
 * qa_started → decided → billed → completed, within one attempt (a reworked attempt starts at
 * `reopened` instead of `created`).
 */
export interface Leg {
  readonly from: string;
  readonly to: string;
  readonly fromTypes: readonly EventType[];
  readonly toTypes: readonly EventType[];
}

export const legs: readonly Leg[] = [
  { from: 'created', to: 'assigned', fromTypes: ['TaskCreated'], toTypes: ['TaskAssigned'] },
  { from: 'reopened', to: 'assigned', fromTypes: ['TaskReopened'], toTypes: ['TaskAssigned'] },
  { from: 'assigned', to: 'labelled', fromTypes: ['TaskAssigned'], toTypes: ['LabelSubmitted'] },
  { from: 'labelled', to: 'qa_started', fromTypes: ['LabelSubmitted'], toTypes: ['QaStarted'] },
  { from: 'qa_started', to: 'decided', fromTypes: ['QaStarted'], toTypes: ['QaPassed', 'QaRejected', 'QaTimedOut'] },
  { from: 'decided', to: 'billed', fromTypes: ['QaPassed'], toTypes: ['BillingCompleted', 'BillingFailed'] },
  { from: 'billed', to: 'completed', fromTypes: ['BillingCompleted'], toTypes: ['TaskCompleted'] },
];

export interface LegTime {
  readonly from: string;
  readonly to: string;
  readonly seconds: number;
}

const earliest = (seen: Readonly<Record<string, string>>, types: readonly EventType[], attempt: number): number | undefined => {
  const times = types.flatMap((t) => {
    const at = seen[seenKey(t, attempt)];
    return at === undefined ? [] : [new Date(at).getTime()];
  });
  return times.length === 0 ? undefined : Math.min(...times);
};

/**
 * The legs an event completes, given what the saga saw before it (`Type#attempt` → instant). A leg
 * is timed once, when the second of its two ends arrives, whichever end that is: events of one
 * task travel on four topics and are consumed in no fixed order. Only the first event of a leg's
 * end counts (a billing retried after BillingFailed is not billed twice). Clock skew between
 * producers never makes a leg negative.
 */
export function legsCompleted(seen: Readonly<Record<string, string>>, fact: { readonly type: EventType; readonly attempt: number; readonly occurredAt: string }): LegTime[] {
  const at = new Date(fact.occurredAt).getTime();
  const times: LegTime[] = [];
  for (const leg of legs) {
    if (leg.toTypes.includes(fact.type) && earliest(seen, leg.toTypes, fact.attempt) === undefined) {
      const from = earliest(seen, leg.fromTypes, fact.attempt);
      if (from !== undefined) times.push({ from: leg.from, to: leg.to, seconds: Math.max(0, at - from) / 1000 });
    }
    if (leg.fromTypes.includes(fact.type) && earliest(seen, leg.fromTypes, fact.attempt) === undefined) {
      const to = earliest(seen, leg.toTypes, fact.attempt);
      if (to !== undefined) times.push({ from: leg.from, to: leg.to, seconds: Math.max(0, to - at) / 1000 });
    }
  }
  return times;
}

export const Outcome = { completed: 'completed', failed: 'failed', cancelled: 'cancelled' } as const;
export type Outcome = (typeof Outcome)[keyof typeof Outcome];

/** The outcome an event ends the saga with, if it is one. A failed task completed by a billing retry counts both. */
export const outcomeOf = (type: EventType): Outcome | undefined =>
  type === 'TaskCompleted' ? Outcome.completed : type === 'TaskFailed' ? Outcome.failed : type === 'TaskCancelled' ? Outcome.cancelled : undefined;
