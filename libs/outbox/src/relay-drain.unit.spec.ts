import type pg from 'pg';
import { describe, expect, it } from 'vitest';
import { RS, US } from './framing';
import type { Pending } from './relay-batch';
import { drain, type DrainDeps } from './relay-drain';
import type { ReadRow } from './relay-rows';
import { BUNDLE_TOPIC, serializeOutboxRows } from './store';

/** A session whose first read answers `rows` and every later one nothing; what went out and was set aside, recorded. */
function relayOver(rows: readonly ReadRow[]) {
  let reads = 0;
  const session = { query: async () => ({ rows: reads++ === 0 ? rows : [] }) } as unknown as pg.PoolClient;
  const sent: string[] = [];
  const setAside: string[] = [];
  const aside = async (r: readonly Pending[]) => void setAside.push(...r.map((p) => `${p.message.key}@${p.id}`));
  const deps: DrainDeps = {
    batchSize: 500,
    maxBatchBytes: 1 << 20,
    sql: '',
    notifications: () => 0,
    leading: () => true,
    rowSize: { bytesPerRow: 0, messagesPerRow: 1 },
    marks: { markPublished: async () => undefined, park: aside, parkHeld: aside, parkUnreadable: aside },
    send: async (batch) => void sent.push(...batch.map((p) => `${p.message.key}@${p.id}`)),
    sendApart: async () => undefined,
  };
  return { run: () => drain(deps, session), sent, setAside };
}

const row = (over: Partial<ReadRow> & Pick<ReadRow, 'id' | 'message_key'>): ReadRow =>
  ({ topic: 't', payload: '{}', headers: {}, messages: null, parked: null, fetched: 2, behind: 0, ...over }) as ReadRow;

describe('the outbox relay: a bundle set aside in the middle of a drain', () => {
  it('holds back the later rows of every key the bundle carries, not only the key that held it', async () => {
    // task-big has a parked row (1): bundle 2, which carries task-big and task-x, is held whole;
    // row 3, task-x's next event, must not go out ahead of task-x's event inside bundle 2.
    const parked = { 'task-big': '1' };
    const frames = serializeOutboxRows([
      { topic: 't', key: 'task-x', eventId: 'e1', eventType: 'T', payload: { seq: 0 } },
      { topic: 't', key: 'task-big', eventId: 'e2', eventType: 'T', payload: { seq: 1 } },
    ]).toString('utf8');
    const relay = relayOver([row({ id: '2', topic: BUNDLE_TOPIC, message_key: 'task-x', payload: 'null', messages: frames, parked }), row({ id: '3', message_key: 'task-x', parked })]);
    await relay.run();
    expect(relay.sent).toEqual([]);
    expect(relay.setAside).toEqual(['task-x@2', 'task-big@2', 'task-x@3']);
  });

  it('holds back the later rows of every key an unreadable bundle names', async () => {
    const frames = ['e1', 't', 'task-x', 'T', '{}', '{"seq":0}'].join(US) + RS + ['e2', 't', 'task-y', 'T', '{not json', '{"seq":0}'].join(US);
    const relay = relayOver([row({ id: '2', topic: BUNDLE_TOPIC, message_key: 'task-x', payload: 'null', messages: frames }), row({ id: '3', message_key: 'task-y' }), row({ id: '4', message_key: 'task-z' })]);
    await relay.run();
    expect(relay.sent).toEqual(['task-z@4']);
    expect(relay.setAside).toEqual(expect.arrayContaining(['task-x@2', 'task-y@3']));
  });
});

/**
 * A session over a pending list, answering the read as readSql would: `behind` counts the pending
 * ids at or below the cursor that are neither being marked ($4) nor among the drain's own ($5).
 * `beforeRead(n)` changes the list before the n-th read, as other sessions' commits would.
 */
function sessionOver(pending: Map<string, string>, beforeRead: (read: number) => void) {
  let reads = 0;
  return {
    query: async (_sql: string, [cursor, , limit, skipping, known]: [string, number, number, string, string]) => {
      beforeRead(++reads);
      const ids = (array: string) => new Set(array.replace(/[{}]/g, '').split(',').filter(Boolean));
      const skip = ids(skipping);
      const own = ids(known);
      const head = [...pending.keys()].filter((id) => !skip.has(id)).sort((a, b) => Number(a) - Number(b)).slice(0, limit);
      const behind = head.filter((id) => Number(id) <= Number(cursor) && !own.has(id)).length;
      const fresh = head.filter((id) => Number(id) > Number(cursor));
      return { rows: fresh.map((id) => row({ id, message_key: pending.get(id)!, fetched: fresh.length, behind })) };
    },
  } as unknown as pg.PoolClient;
}

describe('the outbox relay: a row that commits late, after a handover', () => {
  it('does not send a later event of the late row\'s key when the relay that led before marks rows this one had read', async () => {
    // This relay reads rows 1 and 3. Meanwhile the relay that led before it, which had sent them,
    // marks them (they leave the pending list), and task K's row 2, whose id was taken before the
    // cursor passed it, commits, followed by K's next event, row 4. The count of pending rows at
    // or below the cursor is then one fewer than this drain's own, however many came late.
    const pending = new Map([['1', 'task-a'], ['3', 'task-c']]);
    const session = sessionOver(pending, (read) => {
      if (read !== 2) return;
      pending.delete('1');
      pending.delete('3');
      pending.set('2', 'task-k');
      pending.set('4', 'task-k');
    });
    const sent: string[] = [];
    const deps: DrainDeps = {
      batchSize: 2, // the first read is full, so the drain reads on
      maxBatchBytes: 1 << 20,
      sql: '',
      notifications: () => 0,
      leading: () => true,
      rowSize: { bytesPerRow: 0, messagesPerRow: 1 },
      marks: { markPublished: async (rows) => rows.forEach((r) => pending.delete(r.id)), park: async () => undefined, parkHeld: async () => undefined, parkUnreadable: async () => undefined },
      send: async (batch) => void sent.push(...batch.map((p) => `${p.message.key}@${p.id}`)),
      sendApart: async () => undefined,
    };
    const again = await drain(deps, session);
    expect(sent).toEqual(['task-a@1', 'task-c@3']);
    expect(again).toBe(true); // the next drain starts from the lowest pending id: row 2 first
  });
});
