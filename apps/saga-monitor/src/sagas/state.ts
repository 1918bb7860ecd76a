import type { EventType } from '@labelflow/contracts';

/**
 * The steps the watchdog times. Once one of `after` happened, one of `awaits` is due for the same
 * task within the step's deadline, of the same attempt or (a rework) of the next; each is a machine
 * step (no person waits in between), so a missed one means a service is stuck, paused or lagging.
 * The compensations are watched as well as the happy path: a rejection that never reopens the task
 * leaves it in review for good, a billing failure that never fails it leaves it approved, and a
 * billed attempt that was cancelled or superseded but never refunded keeps the project's money.
 */
export const WatchedStep = { qaStarted: 'qa_started', billing: 'billing', completion: 'completion', rework: 'rework', failure: 'failure', refund: 'refund' } as const;
export type WatchedStep = (typeof WatchedStep)[keyof typeof WatchedStep];

export interface StepSpec {
  readonly step: WatchedStep;
  readonly after: readonly EventType[];
  readonly awaits: readonly EventType[];
  /** Which attempt brings the awaited event: the same (0), or the next one a reopen starts (1). */
  readonly awaitsAttempt: 0 | 1;
  /**
   * `after` alone opens the step (`always`), or only when it leaves a billed attempt owed back
   * (`owed`: see decide's `owedRefunds`); an owed step outlives the cancellation and the reopen
   * that caused it, since those are what it waits on.
   */
  readonly opens: 'always' | 'owed';
}

const specs: Readonly<Record<WatchedStep, StepSpec>> = {
  qa_started: { step: WatchedStep.qaStarted, after: ['LabelSubmitted'], awaits: ['QaStarted'], awaitsAttempt: 0, opens: 'always' },
  billing: { step: WatchedStep.billing, after: ['QaPassed'], awaits: ['BillingCompleted', 'BillingFailed'], awaitsAttempt: 0, opens: 'always' },
  completion: { step: WatchedStep.completion, after: ['BillingCompleted'], awaits: ['TaskCompleted'], awaitsAttempt: 0, opens: 'always' },
  // task-svc reopens a rejected or timed-out attempt: TaskReopened carries the new attempt.
  rework: { step: WatchedStep.rework, after: ['QaRejected', 'QaTimedOut'], awaits: ['TaskReopened'], awaitsAttempt: 1, opens: 'always' },
  // A billing retry that succeeds first completes the task instead.
  failure: { step: WatchedStep.failure, after: ['BillingFailed'], awaits: ['TaskFailed', 'TaskCompleted'], awaitsAttempt: 0, opens: 'always' },
  // billing-svc gives back every completed billing of a cancelled task, and of an attempt a newer
  // one superseded; the refund carries the billed attempt. Whichever of the two events the monitor
  // reads last (they travel on different topics) opens the watch.
  refund: { step: WatchedStep.refund, after: ['TaskCancelled', 'TaskReopened', 'BillingCompleted'], awaits: ['BillingRefunded'], awaitsAttempt: 0, opens: 'owed' },
};

export const watchedSteps: readonly StepSpec[] = Object.values(specs);
export const specOf = (step: WatchedStep): StepSpec => specs[step];

/** Milliseconds each step may take. */
export type StepDeadlines = Readonly<Record<WatchedStep, number>>;

/** What the watchdog needs of one consumed event. */
export interface Fact {
  readonly type: EventType;
  readonly attempt: number;
  /** ISO instant the producer stamped. */
  readonly occurredAt: string;
}

/** A step being waited for; `alertedAt` is set once it missed its deadline. */
export interface Watch {
  readonly step: WatchedStep;
  readonly attempt: number;
  /** When the event that started the step happened. */
  readonly since: string;
  readonly dueAt: string;
  readonly alertedAt: string | null;
}

export interface SagaWatchState {
  /**
   * When each event type happened, per attempt (`Type#attempt`, the first seen). Events of one task
   * travel on four topics, so the awaited event may be consumed before the one that starts the step.
   */
  readonly seen: Readonly<Record<string, string>>;
  /** The open watches, alerting or not. */
  readonly watches: readonly Watch[];
  /** The newest attempt a TaskReopened announced (0 if none): steps of older attempts are never awaited. */
  readonly reopenedAttempt: number;
  /** Absorbing: nothing but refunds is awaited of a cancelled saga. */
  readonly cancelled: boolean;
}

/** `dismissed`: a platform admin ended an alert whose event will never come (a dead letter given up, a lost outbox row). */
export const CloseCause = { arrived: 'arrived', superseded: 'superseded', cancelled: 'cancelled', dismissed: 'dismissed' } as const;
export type CloseCause = (typeof CloseCause)[keyof typeof CloseCause];

export type WatchEvent =
  /** An event of the saga was consumed (folded before any decision it causes). */
  | { readonly type: 'FactObserved'; readonly fact: Fact }
  | { readonly type: 'WatchOpened'; readonly step: WatchedStep; readonly attempt: number; readonly since: string; readonly dueAt: string }
  /** `alertedAt` as it was: a closed watch that was alerting resolves its alert. */
  /** `by`: who dismissed it, when its cause is `dismissed`. */
  | { readonly type: 'WatchClosed'; readonly step: WatchedStep; readonly attempt: number; readonly cause: CloseCause; readonly at: string; readonly since: string; readonly dueAt: string; readonly alertedAt: string | null; readonly by?: string }
  | { readonly type: 'AlertRaised'; readonly step: WatchedStep; readonly attempt: number; readonly since: string; readonly dueAt: string; readonly at: string };

export const emptyWatchState: SagaWatchState = { seen: {}, watches: [], reopenedAttempt: 0, cancelled: false };

export const seenKey = (type: EventType, attempt: number): string => `${type}#${attempt}`;
export const seenAt = (state: SagaWatchState, type: EventType, attempt: number): string | undefined => state.seen[seenKey(type, attempt)];
const sameWatch = (w: Watch, e: { readonly step: WatchedStep; readonly attempt: number }) => w.step === e.step && w.attempt === e.attempt;

export function evolve(state: SagaWatchState, event: WatchEvent): SagaWatchState {
  switch (event.type) {
    case 'FactObserved': {
      const { fact } = event;
      const key = seenKey(fact.type, fact.attempt);
      return {
        ...state,
        seen: key in state.seen ? state.seen : { ...state.seen, [key]: fact.occurredAt },
        reopenedAttempt: fact.type === 'TaskReopened' ? Math.max(state.reopenedAttempt, fact.attempt) : state.reopenedAttempt,
        cancelled: state.cancelled || fact.type === 'TaskCancelled',
      };
    }
    case 'WatchOpened':
      if (state.watches.some((w) => sameWatch(w, event))) return state;
      return { ...state, watches: [...state.watches, { step: event.step, attempt: event.attempt, since: event.since, dueAt: event.dueAt, alertedAt: null }] };
    case 'WatchClosed':
      return { ...state, watches: state.watches.filter((w) => !sameWatch(w, event)) };
    case 'AlertRaised':
      return { ...state, watches: state.watches.map((w) => (sameWatch(w, event) && w.alertedAt === null ? { ...w, alertedAt: event.at } : w)) };
    default: {
      const unhandled: never = event;
      return unhandled;
    }
  }
}
