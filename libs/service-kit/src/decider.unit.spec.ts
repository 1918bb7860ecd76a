import { describe, expect, it } from 'vitest';
import type { PoolClient } from './db';
import { execute, observer, type Decision, type StateStore } from './decider';
import { ServiceKitError, ServiceKitErrors } from './errors';

interface Counter {
  readonly value: number;
}
type Command = { readonly type: 'Add'; readonly by: number } | { readonly type: 'Take' } | { readonly type: 'Noop' } | { readonly type: 'Fail' };
type Event = { readonly type: 'Added'; readonly by: number } | { readonly type: 'Observed' };

const decider = {
  decide(command: Command, state: Counter): Decision<Event> {
    if (command.type === 'Fail') return { ok: false, reason: { code: 'NOPE', message: 'refused' } };
    if (command.type === 'Take') return state.value === 0 ? { ok: true, events: [{ type: 'Added', by: 1 }] } : { ok: false, reason: { code: 'TAKEN', message: 'already taken' } };
    return { ok: true, events: command.type === 'Add' ? [{ type: 'Added', by: command.by }] : [] };
  },
  evolve(state: Counter, event: Event): Counter {
    return event.type === 'Added' ? { value: state.value + event.by } : state;
  },
};

/** In-memory StateStore fake: one keyed value, and a log of every save. */
const inMemoryStore = (initial: Counter) => {
  const rows = new Map<string, Counter>([['k', initial]]);
  const saves: { previous: Counter; next: Counter }[] = [];
  const store: StateStore<Counter> = {
    load: async (_tx, key) => rows.get(key) ?? { value: 0 },
    save: async (_tx, previous, next) => {
      saves.push({ previous, next });
      rows.set('k', next);
    },
  };
  return { store, saves, rows };
};
const tx = {} as PoolClient;

describe('service-kit: execute', () => {
  it('folds the decided events and saves the new state against the loaded one', async () => {
    const initial = { value: 1 };
    const { store, saves, rows } = inMemoryStore(initial);

    const result = await execute(tx, { decider, store }, 'k', { type: 'Add', by: 2 });

    expect(result).toEqual({ ok: true, state: { value: 3 }, events: [{ type: 'Added', by: 2 }] });
    expect(saves).toHaveLength(1);
    expect(saves[0]?.previous).toBe(initial);
    expect(rows.get('k')).toEqual({ value: 3 });
  });

  it('does not save when the accepted decision leaves the state object unchanged', async () => {
    const { store, saves } = inMemoryStore({ value: 1 });

    const result = await execute(tx, { decider, store }, 'k', { type: 'Noop' }, [{ type: 'Observed' }]);

    expect(result).toEqual({ ok: true, state: { value: 1 }, events: [] });
    expect(saves).toHaveLength(0);
  });

  it('folds observed events before the decided ones and returns only the decided events', async () => {
    const { store, saves } = inMemoryStore({ value: 0 });

    const result = await execute(tx, { decider, store }, 'k', { type: 'Noop' }, [{ type: 'Added', by: 5 }]);

    expect(result).toEqual({ ok: true, state: { value: 5 }, events: [] });
    expect(saves).toHaveLength(1);
  });

  it('returns the rejection and saves nothing when the decision is rejected', async () => {
    const { store, saves } = inMemoryStore({ value: 1 });

    const result = await execute(tx, { decider, store }, 'k', { type: 'Fail' }, [{ type: 'Added', by: 5 }]);

    expect(result).toEqual({ ok: false, reason: { code: 'NOPE', message: 'refused' } });
    expect(saves).toHaveLength(0);
  });

  /** A store whose first `losses` saves lose the race to a writer that commits `winner` meanwhile. */
  const racingStore = (losses: number, winner: (previous: Counter) => Counter) => {
    let value: Counter = { value: 0 };
    let lost = 0;
    const store: StateStore<Counter> = {
      conflictRetries: 3,
      load: async () => value,
      save: async (_tx, previous, next) => {
        if (lost < losses) {
          lost++;
          value = winner(value);
          throw new ServiceKitError(ServiceKitErrors.CONCURRENT_UPDATE, 'changed concurrently', { retriable: true });
        }
        if (previous !== value) throw new Error('saved against a state that is not the current one');
        value = next;
      },
    };
    return { store, current: () => value, lost: () => lost };
  };

  it('decides again on the state that won when the save loses a compare-and-set', async () => {
    const race = racingStore(1, (v) => ({ value: v.value + 10 }));

    const result = await execute(tx, { decider, store: race.store }, 'k', { type: 'Add', by: 2 });

    expect(result).toEqual({ ok: true, state: { value: 12 }, events: [{ type: 'Added', by: 2 }] });
    expect(race.current()).toEqual({ value: 12 });
  });

  it('answers with the rejection the winning state calls for, not with the conflict', async () => {
    const race = racingStore(1, () => ({ value: 1 }));

    const result = await execute(tx, { decider, store: race.store }, 'k', { type: 'Take' });

    expect(result).toEqual({ ok: false, reason: { code: 'TAKEN', message: 'already taken' } });
    expect(race.current()).toEqual({ value: 1 });
  });

  it('gives up with CONCURRENT_UPDATE once the row changed under it more than conflictRetries times', async () => {
    const race = racingStore(5, (v) => ({ value: v.value + 10 }));

    await expect(execute(tx, { decider, store: race.store }, 'k', { type: 'Add', by: 2 })).rejects.toMatchObject({ code: 'CONCURRENT_UPDATE' });
    expect(race.lost()).toBe(4);
    expect(race.current()).toEqual({ value: 40 });
  });

  it('never retries a store that does not declare conflictRetries, whose save may have written before it failed', async () => {
    const race = racingStore(1, (v) => ({ value: v.value + 10 }));
    const { conflictRetries: _, ...once } = race.store;

    await expect(execute(tx, { decider, store: once }, 'k', { type: 'Add', by: 2 })).rejects.toMatchObject({ code: 'CONCURRENT_UPDATE' });
    expect(race.lost()).toBe(1);
  });

  it('does not retry errors other than a lost compare-and-set', async () => {
    let saves = 0;
    const store: StateStore<Counter> = {
      load: async () => ({ value: 0 }),
      save: async () => {
        saves++;
        throw new Error('disk full');
      },
    };

    await expect(execute(tx, { decider, store }, 'k', { type: 'Add', by: 1 })).rejects.toThrow('disk full');
    expect(saves).toBe(1);
  });
});

describe('service-kit: observer', () => {
  /** Observes another service's deposits: a deposit of 0 is refused, any other is doubled by a bonus. */
  type Deposited = { readonly type: 'Deposited'; readonly amount: number };
  type Bonus = { readonly type: 'Bonus'; readonly amount: number };
  const bank = {
    decide(command: { readonly type: 'Observe'; readonly event: Deposited } | { readonly type: 'Close' }, _state: Counter): Decision<Bonus> {
      if (command.type === 'Close' || command.event.amount === 0) return { ok: false, reason: { code: 'NOTHING', message: 'nothing to observe' } };
      return { ok: true, events: [{ type: 'Bonus', amount: command.event.amount }] };
    },
    evolve(state: Counter, event: Deposited | Bonus): Counter {
      return { value: event.type === 'Deposited' ? state.value + event.amount : state.value * 2 };
    },
  };
  const observe = observer(bank);

  it('decides the event as an Observe command and folds it in before the events decided on it', () => {
    expect(observe({ type: 'Deposited', amount: 5 }, { value: 1 })).toEqual({ ok: true, state: { value: 12 }, events: [{ type: 'Bonus', amount: 5 }] });
  });

  it('returns the refusal and folds nothing when the decider refuses the event', () => {
    expect(observe({ type: 'Deposited', amount: 0 }, { value: 1 })).toEqual({ ok: false, reason: { code: 'NOTHING', message: 'nothing to observe' } });
  });
});
