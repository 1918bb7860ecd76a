import { describe, expect, it } from 'vitest';
import type { PoolClient } from './db';
import { execute, type Decision, type StateStore } from './decider';

interface Counter {
  readonly value: number;
}
type Command = { readonly type: 'Add'; readonly by: number } | { readonly type: 'Noop' } | { readonly type: 'Fail' };
type Event = { readonly type: 'Added'; readonly by: number } | { readonly type: 'Observed' };

const decider = {
  decide(command: Command, _state: Counter): Decision<Event> {
    if (command.type === 'Fail') return { ok: false, reason: { code: 'NOPE', message: 'refused' } };
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
});
