import type { PoolClient } from './db';

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

/** Loads and saves a decider's state; `save` compares against `previous` (compare-and-set). */
export interface StateStore<S> {
  load(tx: PoolClient, key: string): Promise<S>;
  save(tx: PoolClient, previous: S, next: S): Promise<void>;
}

export type Executed<S, E, R extends Rejection> = { readonly ok: true; readonly state: S; readonly events: readonly E[] } | { readonly ok: false; readonly reason: R };

/**
 * Load, decide, fold, save inside the caller's transaction. `observed` are events from other
 * services that the decision accepted: they are folded into the state before the decided events.
 * The caller emits the returned events through the outbox in the same transaction.
 */
export async function execute<S, C, E, Emitted extends E, R extends Rejection>(
  tx: PoolClient,
  deps: { readonly decider: Decider<S, C, E, Emitted, R>; readonly store: StateStore<S> },
  key: string,
  command: C,
  observed: readonly E[] = [],
): Promise<Executed<S, Emitted, R>> {
  const current = await deps.store.load(tx, key);
  const decision = deps.decider.decide(command, current);
  if (!decision.ok) return decision;
  const next = [...observed, ...decision.events].reduce(deps.decider.evolve, current);
  if (next !== current) await deps.store.save(tx, current, next);
  return { ok: true, state: next, events: decision.events };
}
