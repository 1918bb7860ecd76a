import type { Decision, Rejection } from '@labelflow/service-kit';
import { CloseCause, seenAt, watchedSteps, specOf, WatchedStep, type CloseCause as Cause, type Fact, type SagaWatchState, type StepDeadlines, type Watch, type WatchEvent } from './state';

export type WatchCommand =
  /**
   * An event of the saga was consumed: it may end watches (the awaited event, a reopen, a cancel)
   * and start one. `publishedAt`: when it reached its topic, if later than it happened.
   */
  | { readonly type: 'Observe'; readonly fact: Fact; readonly deadlines: StepDeadlines; readonly publishedAt?: string }
  /** The sweeper's clock reached `now`: every watch due by then alerts, once. */
  | { readonly type: 'Sweep'; readonly now: string }
  /** A platform admin ends an alerting watch whose event will never come, so its alert clears. */
  | { readonly type: 'Dismiss'; readonly step: WatchedStep; readonly attempt: number; readonly at: string; readonly by: string };

export type WatchDecidedEvent = Exclude<WatchEvent, { readonly type: 'FactObserved' }>;

export const WatchRejections = {
  NOTHING_DUE: 'NOTHING_DUE',
  /** No open watch of that step and attempt: it never opened, or it closed meanwhile. */
  WATCH_NOT_FOUND: 'WATCH_NOT_FOUND',
  /** The watch is open but not overdue: dismissing it would silence an alert before there is one. */
  WATCH_NOT_ALERTING: 'WATCH_NOT_ALERTING',
} as const;
export type WatchRejection = Rejection<keyof typeof WatchRejections>;

const plusMs = (iso: string, ms: number) => new Date(new Date(iso).getTime() + ms).toISOString();

/** Why an event ends a watch, if it does. */
function closes(watch: Watch, fact: Fact): Cause | undefined {
  const spec = specOf(watch.step);
  if (fact.attempt === watch.attempt + spec.awaitsAttempt && spec.awaits.includes(fact.type)) return CloseCause.arrived;
  // A refund is owed because of the cancel or the reopen: only the refund itself ends it.
  if (spec.opens === 'owed') return undefined;
  if (fact.type === 'TaskCancelled') return CloseCause.cancelled;
  // The attempt was reworked: its step will never come, and nobody waits for it.
  if (fact.type === 'TaskReopened' && fact.attempt > watch.attempt) return CloseCause.superseded;
  return undefined;
}

/**
 * The billed attempts this fact leaves owed back, as billing-svc refunds them: every one billed
 * (`BillingCompleted`) and not yet refunded once the task is cancelled, and those older than the
 * newest reopen. `state` is as before the fact.
 */
function owedRefunds(state: SagaWatchState, fact: Fact): number[] {
  const billed = (attempt: number) => seenAt(state, 'BillingCompleted', attempt) !== undefined || (fact.type === 'BillingCompleted' && fact.attempt === attempt);
  const owed = (attempt: number) => billed(attempt) && seenAt(state, 'BillingRefunded', attempt) === undefined && !state.watches.some((w) => w.step === WatchedStep.refund && w.attempt === attempt);
  const billedAttempts = Object.keys(state.seen).filter((k) => k.startsWith('BillingCompleted#')).map((k) => Number(k.slice('BillingCompleted#'.length)));
  switch (fact.type) {
    case 'TaskCancelled':
      return state.cancelled ? [] : billedAttempts.filter(owed);
    case 'TaskReopened':
      return billedAttempts.filter((a) => a < fact.attempt && owed(a));
    case 'BillingCompleted':
      return (state.cancelled || fact.attempt < state.reopenedAttempt) && owed(fact.attempt) ? [fact.attempt] : [];
    default:
      return [];
  }
}

/**
 * When the next step could start: once the event was on its topic. A step's deadline is what the
 * service downstream may take, and it cannot act on an event its producer's relay has not yet
 * published (a relay seconds behind would otherwise make it look late, a healthy saga alerting).
 */
const visibleAt = (fact: Fact, publishedAt: string | undefined): string =>
  publishedAt !== undefined && new Date(publishedAt).getTime() > new Date(fact.occurredAt).getTime() ? publishedAt : fact.occurredAt;

function observe(state: SagaWatchState, fact: Fact, deadlines: StepDeadlines, publishedAt: string | undefined): WatchDecidedEvent[] {
  const events: WatchDecidedEvent[] = [];
  const start = visibleAt(fact, publishedAt);
  for (const watch of state.watches) {
    const cause = closes(watch, fact);
    if (cause) events.push({ type: 'WatchClosed', step: watch.step, attempt: watch.attempt, cause, at: fact.occurredAt, since: watch.since, dueAt: watch.dueAt, alertedAt: watch.alertedAt });
  }
  const refundDue = plusMs(start, deadlines.refund);
  for (const attempt of owedRefunds(state, fact)) events.push({ type: 'WatchOpened', step: WatchedStep.refund, attempt, since: fact.occurredAt, dueAt: refundDue });
  if (state.cancelled || fact.type === 'TaskCancelled' || fact.attempt < state.reopenedAttempt) return events;
  for (const spec of watchedSteps) {
    if (spec.opens !== 'always' || !spec.after.includes(fact.type)) continue;
    if (state.watches.some((w) => w.step === spec.step && w.attempt === fact.attempt)) continue;
    // Consumed from another topic before the event that starts the step: nothing to wait for.
    if (spec.awaits.some((type) => seenAt(state, type, fact.attempt + spec.awaitsAttempt) !== undefined)) continue;
    events.push({ type: 'WatchOpened', step: spec.step, attempt: fact.attempt, since: fact.occurredAt, dueAt: plusMs(start, deadlines[spec.step]) });
  }
  return events;
}

/** The watchdog's pure decision: which steps to wait for, which arrived, which are overdue. */
export function decide(command: WatchCommand, state: SagaWatchState): Decision<WatchDecidedEvent, WatchRejection> {
  switch (command.type) {
    case 'Observe':
      return { ok: true, events: observe(state, command.fact, command.deadlines, command.publishedAt) };
    case 'Sweep': {
      const now = new Date(command.now).getTime();
      const due = state.watches.filter((w) => w.alertedAt === null && new Date(w.dueAt).getTime() <= now);
      if (due.length === 0) return { ok: false, reason: { code: WatchRejections.NOTHING_DUE, message: `no watch of the task is due at ${command.now}` } };
      return { ok: true, events: due.map((w) => ({ type: 'AlertRaised', step: w.step, attempt: w.attempt, since: w.since, dueAt: w.dueAt, at: command.now })) };
    }
    case 'Dismiss':
      return dismiss(state, command);
    default: {
      const unhandled: never = command;
      return unhandled;
    }
  }
}

function dismiss(state: SagaWatchState, { step, attempt, at, by }: { readonly step: WatchedStep; readonly attempt: number; readonly at: string; readonly by: string }): Decision<WatchDecidedEvent, WatchRejection> {
  const watch = state.watches.find((w) => w.step === step && w.attempt === attempt);
  if (!watch) return { ok: false, reason: { code: WatchRejections.WATCH_NOT_FOUND, message: `no open ${step} watch of attempt ${attempt}` } };
  if (watch.alertedAt === null) return { ok: false, reason: { code: WatchRejections.WATCH_NOT_ALERTING, message: `the ${step} watch of attempt ${attempt} is not alerting (due ${watch.dueAt})` } };
  return { ok: true, events: [{ type: 'WatchClosed', step, attempt, cause: CloseCause.dismissed, at, since: watch.since, dueAt: watch.dueAt, alertedAt: watch.alertedAt, by }] };
}
