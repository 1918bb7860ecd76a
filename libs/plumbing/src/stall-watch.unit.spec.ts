import { EventEmitter } from 'node:events';
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { PlumbingErrors } from './errors';
import { BackendState, abandonsConnection, watchStalledConnections } from './stall-watch';

/** A pool connection as the watch sees it: pg's active statement, pid and socket. */
const fakeClient = (pid: number) => {
  let active: unknown = null;
  const destroyed: Error[] = [];
  const client = Object.assign(new EventEmitter(), {
    processID: pid,
    _getActiveQuery: () => active,
    connection: { stream: { destroy: (error?: Error) => void destroyed.push(error ?? new Error('destroyed')) } },
  });
  return { client: client as unknown as pg.PoolClient, send: (statement: unknown) => (active = statement), answer: () => (active = null), destroyed };
};

const setup = (answer: (pids: readonly number[]) => Promise<ReadonlyMap<number, BackendState> | BackendState>) => {
  let now = 0;
  const pool = new EventEmitter() as unknown as pg.Pool;
  const probed: (readonly number[])[] = [];
  const abandoned: { pid: number | null; state: BackendState; waitedMs: number }[] = [];
  const watch = watchStalledConnections(pool, {
    connectionString: 'postgres://unused',
    stallMs: 1_000,
    probe: (pids) => {
      probed.push(pids);
      return answer(pids);
    },
    onAbandon: (event) => void abandoned.push(event),
    now: () => now,
  });
  const connect = (pid: number) => {
    const fake = fakeClient(pid);
    pool.emit('connect', fake.client);
    return fake;
  };
  return { watch, pool, connect, probed, abandoned, advance: (ms: number) => (now += ms) };
};

describe('the stall watch', () => {
  it('relies on the pg internals it reads, so an upgrade that moves them fails here and not in an outage', () => {
    const client = new pg.Client({ connectionString: 'postgres://nobody@127.0.0.1:1/none' });
    expect(typeof (client as unknown as { _getActiveQuery?: unknown })._getActiveQuery).toBe('function');
    expect((client as unknown as { _getActiveQuery: () => unknown })._getActiveQuery()).toBeNull();
    expect(typeof (client as unknown as { connection: { stream: { destroy?: unknown } } }).connection.stream.destroy).toBe('function');
    expect(client).toHaveProperty('processID', null);
  });

  it('asks nothing while statements keep being answered, however long the connection is busy', async () => {
    const { watch, connect, probed, advance } = setup(async () => BackendState.unreachable);
    const c = connect(7);
    for (let i = 0; i < 10; i++) {
      c.send({ n: i });
      await watch.tick();
      advance(600);
      await watch.tick();
    }
    c.answer();
    advance(5_000);
    await watch.tick();
    expect(probed).toEqual([]);
    expect(c.destroyed).toEqual([]);
    watch.stop();
  });

  it('closes a connection stalled past the bound when the server cannot be reached, with a retriable error its statements fail with', async () => {
    const { watch, connect, abandoned, advance } = setup(async () => BackendState.unreachable);
    const c = connect(7);
    c.send({});
    await watch.tick();
    advance(999);
    await watch.tick();
    expect(c.destroyed).toEqual([]);
    advance(1);
    await watch.tick();
    expect(c.destroyed).toEqual([expect.objectContaining({ code: PlumbingErrors.CONNECTION_STALLED, retriable: true })]);
    expect(abandoned).toEqual([{ pid: 7, state: 'unreachable', waitedMs: 1_000 }]);
    watch.stop();
  });

  it('waits on for a backend the server says is still working, and asks again only a stall later', async () => {
    const { watch, connect, probed, advance } = setup(async (pids) => new Map(pids.map((p) => [p, BackendState.working])));
    const c = connect(7);
    c.send({});
    await watch.tick();
    advance(1_000);
    await watch.tick();
    advance(500);
    await watch.tick();
    expect(probed).toEqual([[7]]);
    advance(500);
    await watch.tick();
    expect(probed).toEqual([[7], [7]]);
    expect(c.destroyed).toEqual([]);
    watch.stop();
  });

  it('asks once for every stalled connection and closes only those whose backend is idle or gone', async () => {
    const { watch, connect, probed, abandoned, advance } = setup(async () => new Map([[1, BackendState.working], [2, BackendState.answered]]));
    const [working, idle, gone] = [connect(1), connect(2), connect(3)];
    for (const c of [working, idle, gone]) c.send({});
    await watch.tick();
    advance(1_000);
    await watch.tick();
    expect(probed).toEqual([[1, 2, 3]]);
    expect([working.destroyed.length, idle.destroyed.length, gone.destroyed.length]).toEqual([0, 1, 1]);
    expect(abandoned.map((a) => [a.pid, a.state])).toEqual([
      [2, 'answered'],
      [3, 'gone'],
    ]);
    watch.stop();
  });

  it('keeps a connection whose answer arrived while the server was being asked', async () => {
    let release: () => void = () => undefined;
    const { watch, connect, advance } = setup(() => new Promise((resolve) => (release = () => resolve(BackendState.unreachable))));
    const c = connect(7);
    c.send({});
    await watch.tick();
    advance(1_000);
    const ticking = watch.tick();
    c.answer();
    release();
    await ticking;
    expect(c.destroyed).toEqual([]);
    watch.stop();
  });

  it('keeps a connection the server answered about with an error, since that is no verdict', async () => {
    const { watch, connect, advance } = setup(async () => BackendState.unknown);
    const c = connect(7);
    c.send({});
    await watch.tick();
    advance(1_000);
    await watch.tick();
    expect(c.destroyed).toEqual([]);
    expect([BackendState.working, BackendState.unknown].map(abandonsConnection)).toEqual([false, false]);
    watch.stop();
  });

  it('forgets a connection the pool removed, and looks at nothing once stopped', async () => {
    const { watch, pool, connect, probed, advance } = setup(async () => BackendState.unreachable);
    const [removed, kept] = [connect(7), connect(8)];
    removed.send({});
    kept.send({});
    await watch.tick();
    pool.emit('remove', removed.client);
    advance(1_000);
    await watch.tick();
    expect(probed).toEqual([[8]]);
    const later = connect(9);
    later.send({});
    watch.stop();
    await watch.tick();
    advance(1_000);
    await watch.tick();
    expect(probed).toEqual([[8]]);
  });
});
