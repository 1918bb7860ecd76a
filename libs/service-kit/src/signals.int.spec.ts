import { afterAll, afterEach, beforeAll, describe, expect, inject, it } from 'vitest';
import pg from 'pg';
import { captureLogs, createTestDatabase, eventually, uniqueName } from '@labelflow/testing';
import { enqueue, outboxMigrationSql } from '@labelflow/outbox';
import { createPool, withTransaction, type Pool } from './db';
import { createTaskSignals, MAX_SIGNAL_PAYLOAD_BYTES, type TaskSignals, type TaskSignalsOptions } from './signals';

const infra = inject('infra');
const logger = captureLogs({ service: 'signals-test' }).logger;

describe('task signals over LISTEN/NOTIFY', () => {
  let pool: Pool;
  let url: string;
  let drop: () => Promise<void>;
  let admin: pg.Client;
  const opened: TaskSignals[] = [];

  beforeAll(async () => {
    const db = await createTestDatabase(infra.pgUrl, uniqueName('signals'));
    url = db.url;
    drop = db.drop;
    pool = createPool(url, { refuseNestedConnections: true });
    admin = new pg.Client({ connectionString: url });
    await admin.connect();
  });
  afterEach(async () => {
    await Promise.all(opened.splice(0).map((s) => s.close()));
  });
  afterAll(async () => {
    await admin.end();
    await pool.end();
    await drop();
  });

  /** A started instance, as each service instance runs one; closed after the test. */
  const instance = async (channel: string, over: Partial<TaskSignalsOptions> = {}) => {
    const signals = createTaskSignals({ pool, channel, logger: logger, ...over });
    opened.push(signals);
    await signals.start();
    return signals;
  };
  const commit = (signals: TaskSignals, ids: readonly string[]) => withTransaction(pool, (tx) => signals.publish(tx, ids));
  const listenerPid = async (channel: string) =>
    (await admin.query<{ pid: number }>('SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND query = $1', [`LISTEN "${channel}"`])).rows.map((r) => r.pid);
  const checkedOut = () => pool.totalCount - pool.idleCount;

  it('wakes waiters in every instance once the publishing transaction commits, and not before', async () => {
    const channel = uniqueName('signals');
    const [a, b] = [await instance(channel), await instance(channel)];
    const onA = a.subscribe('101');
    const onB = b.subscribe('101');
    // Each instance hears on its own session: the barrier must reach both before either's silence counts.
    const barrierA = a.subscribe('barrier');
    const barrierB = b.subscribe('barrier');

    const tx = await pool.connect();
    try {
      await tx.query('BEGIN');
      await b.publish(tx, ['101']);
      // Notifications reach a listener in commit order: once the later commit is heard, an
      // earlier one would have been too.
      await commit(b, ['barrier']);
      expect(await barrierA.wait(10_000)).toBe(true);
      expect(await barrierB.wait(10_000)).toBe(true);
      expect(await onA.wait(0)).toBe(false);
      expect(await onB.wait(0)).toBe(false);
      await tx.query('COMMIT');
    } finally {
      tx.release();
    }
    expect(await onA.wait(10_000)).toBe(true);
    expect(await onB.wait(10_000)).toBe(true);
    for (const s of [onA, onB, barrierA, barrierB]) s.cancel();
  });

  it('wakes waiters with a signal sent in the outbox insert, and the relay with the same statement', async () => {
    const channel = uniqueName('signals');
    const relayChannel = uniqueName('outbox');
    await admin.query(outboxMigrationSql);
    await admin.query(`LISTEN "${relayChannel}"`);
    const relayHeard: string[] = [];
    admin.on('notification', (n) => relayHeard.push(n.channel));
    const signals = await instance(channel);
    const waiting = signals.subscribe('303');

    await withTransaction(pool, (tx) => enqueue(tx, relayChannel, [{ topic: 't', key: '303', eventId: uniqueName('event'), eventType: 'TaskCreated', payload: {} }], signals.notification(['303'])));

    expect(await waiting.wait(10_000)).toBe(true);
    await eventually(() => expect(relayHeard).toContain(relayChannel));
    waiting.cancel();
    await admin.query(`UNLISTEN "${relayChannel}"`);
  });

  it('wakes nobody for a transaction that rolled back', async () => {
    const channel = uniqueName('signals');
    const signals = await instance(channel);
    const ghost = signals.subscribe('202');
    const barrier = signals.subscribe('203');

    await expect(
      withTransaction(pool, async (tx) => {
        await signals.publish(tx, ['202']);
        throw new Error('rolled back on purpose');
      }),
    ).rejects.toThrow('rolled back on purpose');
    await commit(signals, ['203']);

    expect(await barrier.wait(10_000)).toBe(true);
    expect(await ghost.wait(0)).toBe(false);
    ghost.cancel();
    barrier.cancel();
  });

  it('wakes a subscription taken before the change even when it waits only after the commit', async () => {
    const signals = await instance(uniqueName('signals'));
    const subscription = signals.subscribe('303');
    await commit(signals, ['303']);
    // The notification may land before or after `wait` starts; either way the wait reports it.
    expect(await subscription.wait(10_000)).toBe(true);
    subscription.cancel();
  });

  it('delivers thousands of ids from one transaction in payloads under the 8000-byte limit', async () => {
    const channel = uniqueName('signals');
    const signals = await instance(channel);
    const ids = Array.from({ length: 5_000 }, (_, i) => String(250221024157630464n + BigInt(i)));
    const observer = new pg.Client({ connectionString: url });
    await observer.connect();
    const payloads: string[] = [];
    observer.on('notification', (m) => payloads.push(m.payload ?? ''));
    await observer.query(`LISTEN "${channel}"`);
    try {
      const first = signals.subscribe(ids[0]!);
      const last = signals.subscribe(ids[ids.length - 1]!);
      await commit(signals, [...ids, ...ids.slice(0, 100)]);
      // A later commit's notification arrives after every one of the first: once it is heard, a
      // stray payload (an id sent twice) would have been too.
      await commit(signals, ['sentinel']);

      expect(await first.wait(10_000)).toBe(true);
      expect(await last.wait(10_000)).toBe(true);
      await eventually(() => expect(payloads.at(-1)).toBe('sentinel'));
      payloads.pop();
      expect(payloads.flatMap((p) => p.split(',')).length).toBe(ids.length);
      expect(payloads.length).toBeGreaterThan(1);
      for (const p of payloads) expect(Buffer.byteLength(p)).toBeLessThanOrEqual(MAX_SIGNAL_PAYLOAD_BYTES);
      expect(payloads.flatMap((p) => p.split(',')).sort()).toEqual([...ids].sort());
    } finally {
      await observer.end();
    }
  });

  it('survives pg_terminate_backend of its LISTEN session: no crash, no leaked connection, and signals resume', async () => {
    const channel = uniqueName('signals');
    const { logger, lines } = captureLogs({ service: 'signals-test', level: 'info' });
    const signals = await instance(channel, { logger });
    const [pid] = await listenerPid(channel);
    expect(pid).toBeDefined();
    // Waiting across the loss: whatever committed meanwhile was not heard, so the waiter looks again.
    const across = signals.subscribe('404');

    await admin.query('SELECT pg_terminate_backend($1, 10000)', [pid]);
    await eventually(() => expect(lines.filter((l) => l.msg === 'task signals listening').map((l) => l.session)).toEqual([1, 2]), { timeoutMs: 15_000 });
    expect(lines.some((l) => l.msg === 'task signals: LISTEN session lost; listening again')).toBe(true);
    const now = await listenerPid(channel);
    expect(now).toHaveLength(1);
    expect(now[0]).not.toBe(pid);
    expect(await across.wait(0)).toBe(true);
    across.cancel();

    const after = signals.subscribe('405');
    await commit(signals, ['405']);
    expect(await after.wait(10_000)).toBe(true);
    after.cancel();
    // At rest an instance holds exactly one client: its LISTEN session.
    await eventually(() => expect(checkedOut()).toBe(1));
  });

  it('ends a wait that starts while the listener is away by its timeout, and closes without waiting for the next reconnect', async () => {
    const channel = uniqueName('signals');
    const { logger, lines } = captureLogs({ service: 'signals-test', level: 'info' });
    const signals = await instance(channel, { logger, reconnect: { initialMs: 60_000, maxMs: 60_000 } });
    const [pid] = await listenerPid(channel);
    await admin.query('SELECT pg_terminate_backend($1, 10000)', [pid]);
    await eventually(() => expect(lines.some((l) => l.msg === 'task signals: LISTEN session lost; listening again')).toBe(true));
    expect(checkedOut()).toBe(0);

    const started = Date.now();
    expect(await signals.wait('505', 200)).toBe(false);
    expect(Date.now() - started).toBeLessThan(5_000);

    const closing = Date.now();
    await signals.close();
    expect(Date.now() - closing).toBeLessThan(5_000);
  });

  it('ends every wait with false on close and returns its connection', async () => {
    const signals = await instance(uniqueName('signals'));
    const pending = signals.wait('606', 60_000);
    await signals.close();
    expect(await pending).toBe(false);
    expect(signals.closed).toBe(true);
    expect(await signals.wait('606', 60_000)).toBe(false);
    expect(checkedOut()).toBe(0);
  });

  it('refuses a channel that is not a plain identifier', () => {
    expect(() => createTaskSignals({ pool, channel: 'signals"; DROP TABLE x; --', logger: logger })).toThrow(/PostgreSQL identifier/);
  });
});
