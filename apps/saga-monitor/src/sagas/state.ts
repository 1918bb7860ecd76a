import type { EventType } from '@labelflow/contracts';

/**
 * The steps the watchdog times. Once `after` happened, one of `awaits` is due for the same task
 * and attempt within the step's deadline; each is a machine step (no person waits in between), so
 * a missed one means a service is stuck, paused or lagging.
 */
export const WatchedStep = { qaStarted: 'qa_started', billing: 'billing', completion: 'completion' } as const;
export type WatchedStep = (typeof WatchedStep)[keyof typeof WatchedStep];

export interface StepSpec {
  readonly step: WatchedStep;
  readonly after: EventType;
  readonly awaits: readonly EventType[];
}

const specs: Readonly<Record<WatchedStep, StepSpec>> = {
  qa_started: { step: WatchedStep.qaStarted, after: 'LabelSubmitted', awaits: ['QaStarted'] },
  billing: { step: WatchedStep.billing, after: 'QaPassed', awaits: ['BillingCompleted', 'BillingFailed'] },
  completion: { step: WatchedStep.completion, after: 'BillingCompleted', awaits: ['TaskCompleted'] },
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
  /** Absorbing: nothing is awaited of a cancelled saga. */
  readonly cancelled: boolean;
}

export const CloseCause = { arrived: 'arrived', superseded: 'superseded', cancelled: 'cancelled' } as const;
export type CloseCause = (typeof CloseCause)[keyof typeof CloseCause];

export type WatchEvent =
  /** An event of the saga was consumed (folded before any decision it causes). */
  | { readonly type: 'FactObserved'; readonly fact: Fact }
  | { readonly type: 'WatchOpened'; readonly step: WatchedStep; readonly attempt: number; readonly since: string; readonly dueAt: string }
  /** `alertedAt` as it was: a closed watch that was alerting resolves its alert. */
  | { readonly type: 'WatchClosed'; readonly step: WatchedStep; readonly attempt: number; readonly cause: CloseCause; readonly at: string; readonly since: string; readonly dueAt: string; readonly alertedAt: string | null }
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
