import { fold, type Decider, type Decision, type Rejection } from '@labelflow/service-kit';

/** What a command came to, as `execute` leaves it: the decision and the state after it. */
export interface Outcome<S, Emitted, R extends Rejection> {
  readonly decision: Decision<Emitted, R>;
  /** The observed events, then the decided ones, folded in; the given state itself when rejected. */
  readonly state: S;
  /** The rejection's code; undefined when the command was accepted. */
  readonly rejection: R['code'] | undefined;
}

export interface DeciderSpec<S, C, E, Emitted extends E, R extends Rejection> {
  /** Given: the state the service would have stored after these events. */
  given(...events: readonly E[]): S;
  /** Given: `state` with more events folded in. */
  givenFrom(state: S, ...events: readonly E[]): S;
  /** When: the command decided against the state, and folded as `execute` folds it. */
  when(state: S, command: C): Outcome<S, Emitted, R>;
  /** The rejection's code of a decision; undefined when it accepted. */
  rejectionCode(decision: Decision<Emitted, R>): R['code'] | undefined;
}

/**
 * Given-events / when-command / then-expect for a pure decider, the way every service's unit tests
 * read. `initial` is the state before any event (what the store loads for an unknown key);
 * `observed` names the events a command carries that are folded in before the decided ones (an
 * `Observe` command's event), exactly as the service's execute or reaction folds them.
 */
export function deciderSpec<S, C, E, Emitted extends E, R extends Rejection>(
  decider: Decider<S, C, E, Emitted, R>,
  options: { readonly initial: () => S; readonly observed: (command: C) => readonly E[] },
): DeciderSpec<S, C, E, Emitted, R> {
  const givenFrom = (state: S, ...events: readonly E[]): S => events.reduce(decider.evolve, state);
  const rejectionCode = (decision: Decision<Emitted, R>) => (decision.ok ? undefined : decision.reason.code);
  return {
    given: (...events) => givenFrom(options.initial(), ...events),
    givenFrom,
    when(state, command) {
      const executed = fold(decider, state, command, options.observed(command));
      const decision: Decision<Emitted, R> = executed.ok ? { ok: true, events: executed.events } : executed;
      return { decision, state: executed.ok ? executed.state : state, rejection: rejectionCode(decision) };
    },
    rejectionCode,
  };
}
