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
