import pg from 'pg';
import { afterAll, beforeAll, beforeEach, describe, expect, inject, it } from 'vitest';
import { createTestDatabase, uniqueName } from '@labelflow/testing';
import { createPool, withTransaction, type Pool, type PoolClient } from './db';
import { execute, type Decision, type StateStore } from './decider';
import { ServiceKitError, ServiceKitErrors } from './errors';

const infra = inject('infra');

interface Slot {
  readonly holder: string | null;
  readonly version: number;
}
type Command = { readonly type: 'Take'; readonly by: string } | { readonly type: 'Release' };
type Event = { readonly type: 'Taken'; readonly by: string } | { readonly type: 'Released' };

const decider = {
  decide(command: Command, state: Slot): Decision<Event> {
    if (command.type === 'Release') return state.holder ? { ok: true, events: [{ type: 'Released' }] } : { ok: false, reason: { code: 'FREE', message: 'nobody holds it' } };
    if (state.holder) return { ok: false, reason: { code: 'TAKEN', message: `held by ${state.holder}` } };
    return { ok: true, events: [{ type: 'Taken', by: command.by }] };
  },
  evolve(state: Slot, event: Event): Slot {
    return { ...state, holder: event.type === 'Taken' ? event.by : null };
  },
};

/** The same compare-and-set on a version column as the services' repositories. */
const store: StateStore<Slot> = {
  conflictRetries: 3,
  load: async (tx, key) => {
    const { rows } = await tx.query<{ holder: string | null; version: number }>('SELECT holder, version FROM slots WHERE id = $1', [key]);
    return { holder: rows[0]?.holder ?? null, version: rows[0]?.version ?? 0 };
  },
  save: async (tx, previous, next) => {
    const result = await tx.query('UPDATE slots SET holder = $2, version = version + 1 WHERE id = $1 AND version = $3', ['s', next.holder, previous.version]);
    if (result.rowCount !== 1) throw new ServiceKitError(ServiceKitErrors.CONCURRENT_UPDATE, 'slot changed concurrently', { retriable: true });
  },
};

describe('execute against real PostgreSQL compare-and-set', () => {
  let pool: Pool;
  let other: pg.Client;
  let drop: () => Promise<void>;
  beforeAll(async () => {
    const db = await createTestDatabase(infra.pgUrl, uniqueName('decider'));
    drop = db.drop;
    pool = createPool(db.url, { max: 2, refuseNestedConnections: true });
    await pool.query('CREATE TABLE slots (id text PRIMARY KEY, holder text, version int NOT NULL)');
    // A second session that is not the service pool: the racing writer.
    other = new pg.Client({ connectionString: db.url });
    await other.connect();
  });
  afterAll(async () => {
    await other.end();
    await pool.end();
    await drop();
  });
  beforeEach(async () => {
    await pool.query("INSERT INTO slots VALUES ('s', NULL, 1) ON CONFLICT (id) DO UPDATE SET holder = NULL, version = 1");
  });

  /**
   * Resolves once our transaction's UPDATE waits for the row lock the other session holds. Asked
   * through the pool, outside any transaction: inside one, pg_stat_activity is a cached snapshot.
   */
  const blockedOnRowLock = async () => {
    for (;;) {
      const { rows } = await pool.query<{ n: number }>(
        "SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE 'UPDATE slots%'",
      );
      if (rows[0]?.n === 1) return;
      await new Promise((r) => setTimeout(r, 10));
    }
  };

  /**
   * Runs `Take` in the service pool while another session changes the slot between our load and our
   * save. The other session writes (taking the row lock) before our first load returns, so our save
   * always comes second: it waits for the lock, and after the commit READ COMMITTED re-checks
   * `version = 1` against the new row and updates nothing.
   */
  const raceAgainst = async (otherWrite: string) => {
    const loads: Slot[] = [];
    const observing: StateStore<Slot> = {
      conflictRetries: store.conflictRetries,
      load: async (tx: PoolClient, key) => {
        const slot = await store.load(tx, key);
        loads.push(slot);
        if (loads.length === 1) {
          await other.query('BEGIN');
          await other.query(otherWrite);
        }
        return slot;
      },
      save: store.save,
    };
    const ours = withTransaction(pool, (tx) => execute(tx, { decider, store: observing }, 's', { type: 'Take', by: 'ours' }));
    // Should ours end without ever waiting, the race fails with its outcome instead of hanging.
    await Promise.race([blockedOnRowLock(), ours.then((r) => Promise.reject(new Error(`finished without waiting for the row lock: ${JSON.stringify(r)}`)))]);
    await other.query('COMMIT');
    return { result: await ours, loads };
  };

  it('decides again after the row changed between load and save, and applies on top of the winner', async () => {
    const { result, loads } = await raceAgainst("UPDATE slots SET version = version + 1 WHERE id = 's'");

    expect(loads.map((s) => s.version)).toEqual([1, 2]);
    expect(result).toEqual({ ok: true, state: { holder: 'ours', version: 2 }, events: [{ type: 'Taken', by: 'ours' }] });
    const { rows } = await pool.query<{ holder: string; version: number }>("SELECT holder, version FROM slots WHERE id = 's'");
    expect(rows[0]).toEqual({ holder: 'ours', version: 3 });
  });

  it('answers the loser of a race with the rejection of the winning state, not with a conflict', async () => {
    const { result, loads } = await raceAgainst("UPDATE slots SET holder = 'theirs', version = version + 1 WHERE id = 's'");

    expect(loads).toHaveLength(2);
    expect(result).toEqual({ ok: false, reason: { code: 'TAKEN', message: 'held by theirs' } });
    const { rows } = await pool.query<{ holder: string; version: number }>("SELECT holder, version FROM slots WHERE id = 's'");
    expect(rows[0]).toEqual({ holder: 'theirs', version: 2 });
  });
});
