import type { PoolClient } from './db';
import { ServiceKitError, ServiceKitErrors } from './errors';

export interface Rejection<Code extends string = string> {
  readonly code: Code;
  readonly message: string;
}

export type Decision<E, R extends Rejection = Rejection> = { readonly ok: true; readonly events: readonly E[] } | { readonly ok: false; readonly reason: R };

/** Emmett-style decider: `decide` chooses events, `evolve` folds them; both pure. */
export interface Decider<S, C, E, Emitted extends E = E, R extends Rejection = Rejection> {
  decide(command: C, state: S): Decision<Emitted, R>;
  evolve(state: S, event: E): S;
}

/**
 * Loads and saves a decider's state; `save` compares against `previous` (compare-and-set) and throws
 * `ServiceKitError(CONCURRENT_UPDATE)` when the comparison fails. `K` is the key's type, so a store
 * of tasks takes a TaskId and a store of projects a ProjectId, never a bare string to cast.
 *
 * `conflictRetries` lets `execute` decide again after such a conflict, up to that many times. Set it
 * only when `save` throws the conflict before it has written anything: the retry runs in the same
 * transaction, and a half-written save would be read back as if it were the winner's state. A store
 * that locks its rows at `load` (SELECT ... FOR UPDATE) has no conflicts to retry and leaves it out.
 */
export interface StateStore<S, K extends string = string> {
  load(tx: PoolClient, key: K): Promise<S>;
  save(tx: PoolClient, previous: S, next: S): Promise<void>;
  readonly conflictRetries?: number;
}

export type Executed<S, E, R extends Rejection> = { readonly ok: true; readonly state: S; readonly events: readonly E[] } | { readonly ok: false; readonly reason: R };

/**
 * The pure heart of every command and every consumed event: decide against the state, then fold
 * the observed events and the decided ones into it. Routes, reactions and sweepers all get this.
 */
export function fold<S, C, E, Emitted extends E, R extends Rejection>(decider: Decider<S, C, E, Emitted, R>, state: S, command: C, observed: readonly E[] = []): Executed<S, Emitted, R> {
  const decision = decider.decide(command, state);
  if (!decision.ok) return decision;
  return { ok: true, state: [...observed, ...decision.events].reduce(decider.evolve, state), events: decision.events };
}

/** The event a command union's `Observe` member carries: what its service observes of the others. */
export type ObservedBy<C> = C extends { readonly type: 'Observe'; readonly event: infer O } ? O : never;

/**
 * The reaction to an event the service observes, the same in every service: the decider decides
 * `{ type: 'Observe', event }` and, when it accepts, the event is folded in before the decided ones
 * (it is a fact the state keeps: the tombstones later events are checked against).
 */
export function observer<S, C, E, Emitted extends E, R extends Rejection>(decider: Decider<S, C, E, Emitted, R>): (event: ObservedBy<C> & E, state: S) => Executed<S, Emitted, R> {
  // The command is C's Observe member, as ObservedBy<C> guarantees; TS cannot follow a conditional type back to C.
  return (event, state) => fold(decider, state, { type: 'Observe', event } as C, [event]);
}

const isConflict = (error: unknown) => error instanceof ServiceKitError && error.code === ServiceKitErrors.CONCURRENT_UPDATE;

/**
 * Load, decide, fold, save inside the caller's transaction. `observed` are events from other
 * services that the decision accepted: they are folded into the state before the decided events.
 * The caller emits the returned events through the outbox in the same transaction.
 *
 * A lost compare-and-set is not the caller's problem: under READ COMMITTED the next load in the
 * same transaction sees the row that won, and the command is decided again against it. A claim
 * that lost to another claim is then rejected for what it is (already assigned), and a cancel that
 * raced a consumer's update simply applies on top of it. Only a row that keeps changing under us
 * (more than the store's `conflictRetries` times) surfaces as CONCURRENT_UPDATE.
 */
export async function execute<S, C, E, Emitted extends E, R extends Rejection, K extends string>(
  tx: PoolClient,
  deps: { readonly decider: Decider<S, C, E, Emitted, R>; readonly store: StateStore<S, K> },
  key: K,
  command: C,
  observed: readonly E[] = [],
): Promise<Executed<S, Emitted, R>> {
  const retries = deps.store.conflictRetries ?? 0;
  for (let attempt = 0; ; attempt++) {
    const current = await deps.store.load(tx, key);
    const result = fold(deps.decider, current, command, observed);
    if (!result.ok) return result;
    try {
      if (result.state !== current) await deps.store.save(tx, current, result.state);
    } catch (error) {
      if (isConflict(error) && attempt < retries) continue;
      throw error;
    }
    return result;
  }
}
