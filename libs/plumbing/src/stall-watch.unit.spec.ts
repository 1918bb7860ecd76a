import { EventEmitter } from 'node:events';
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { PlumbingErrors } from './errors';
import { BackendState, abandonsConnection, probeBackends, watchStalledConnections, type ProbeAnswer } from './stall-watch';
import { startFakePostgres, startSilentServer } from './test-support/fake-postgres';

/** A pool connection as the watch sees it: pg's active statement, pid and socket. */
const fakeClient = (pid: number) => {
  let active: unknown = null;
  const destroyed: Error[] = [];
  const stream = { bytesRead: 0, bytesWritten: 0, remoteAddress: '10.0.0.1', remotePort: 5432, destroy: (error?: Error) => void destroyed.push(error ?? new Error('destroyed')) };
  const client = Object.assign(new EventEmitter(), { processID: pid, _getActiveQuery: () => active, connection: { stream } });
  return { client: client as unknown as pg.PoolClient, send: (statement: unknown) => (active = statement), answer: () => (active = null), receive: (bytes: number) => (stream.bytesRead += bytes), destroyed };
};

/** What the server at the fake connections' address says of these backends. */
const fromOurServer = (states: Iterable<readonly [number, BackendState]>): ProbeAnswer => ({ states: new Map(states), server: '10.0.0.1:5432' });

const setup = (answer: (pids: readonly number[]) => Promise<ProbeAnswer>, onAbandon?: () => void) => {
  let now = 0;
  const pool = new EventEmitter() as unknown as pg.Pool;
  const probed: (readonly number[])[] = [];
  const terminated: (readonly number[])[] = [];
  const abandoned: { pid: number | null; state: BackendState; waitedMs: number }[] = [];
  const watch = watchStalledConnections(pool, {
    connectionString: 'postgres://unused',
    stallMs: 1_000,
    probe: (pids) => {
      probed.push(pids);
      return answer(pids);
    },
    terminate: async (pids) => void terminated.push(pids),
    onAbandon: (event) => {
      abandoned.push(event);
      onAbandon?.();
    },
    now: () => now,
    interval: false,
  });
  const connect = (pid: number) => {
    const fake = fakeClient(pid);
    pool.emit('connect', fake.client);
    return fake;
  };
  /** A connection whose statement went a whole stall without an answer, looked at by two ticks. */
  const stalled = async (pid: number) => {
    const fake = connect(pid);
    fake.send({});
    await watch.tick();
    now += 1_000;
    await watch.tick();
    return fake;
  };
  return { watch, pool, connect, stalled, probed, terminated, abandoned, advance: (ms: number) => (now += ms) };
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
    const { watch, stalled, probed, advance } = setup(async (pids) => fromOurServer(pids.map((p) => [p, BackendState.working] as const)));
    const c = await stalled(7);
    advance(500);
    await watch.tick();
    expect(probed).toEqual([[7]]);
    advance(500);
    await watch.tick();
    expect(probed).toEqual([[7], [7]]);
    expect(c.destroyed).toEqual([]);
    watch.stop();
  });

  it('asks once for every stalled connection, closes only those whose backend is idle or gone, and ends the idle sessions so none keeps its locks', async () => {
    const { watch, connect, probed, terminated, abandoned, advance } = setup(async () => fromOurServer([[1, BackendState.working], [2, BackendState.answered]]));
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
    expect(terminated).toEqual([[2]]);
    watch.stop();
  });

  it('gives no verdict from a probe that reached another server than the stalled connection did, nor ends a session there', async () => {
    const { watch, stalled, terminated, abandoned } = setup(async () => ({ states: new Map([[7, BackendState.answered]]), server: '10.0.0.2:5432' }));
    const c = await stalled(7);
    expect([c.destroyed, abandoned, terminated]).toEqual([[], [], []]);
    watch.stop();
  });

  it.each([
    ['its answer arrived', (c: ReturnType<typeof fakeClient>) => void c.answer()],
    ['it received bytes', (c: ReturnType<typeof fakeClient>) => void c.receive(10)],
  ])('keeps a connection when %s while the server was being asked', async (_what, meanwhile) => {
    let release: () => void = () => undefined;
    const { watch, connect, advance } = setup(() => new Promise((resolve) => (release = () => resolve(BackendState.unreachable))));
    const c = connect(7);
    c.send({});
    await watch.tick();
    advance(1_000);
    const ticking = watch.tick();
    meanwhile(c);
    release();
    await ticking;
    expect(c.destroyed).toEqual([]);
    watch.stop();
  });

  it('keeps a connection the server answered about with an error, since that is no verdict', async () => {
    const { watch, stalled } = setup(async () => BackendState.unknown);
    const c = await stalled(7);
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
  it('counts bytes still moving on the socket as progress, so a long answer being read is never judged stalled', async () => {
    const { watch, connect, probed, advance } = setup(async () => BackendState.unreachable);
    const c = connect(7);
    c.send({});
    await watch.tick();
    for (let i = 0; i < 5; i++) {
      advance(900);
      c.receive(64 * 1024);
      await watch.tick();
    }
    expect(probed).toEqual([]);
    advance(1_000);
    await watch.tick();
    expect(probed).toEqual([[7]]);
    watch.stop();
  });


  it('closes every stalled connection even when the listener told of one throws', async () => {
    const { watch, connect, abandoned, advance } = setup(async () => BackendState.unreachable, () => {
      throw new Error('a logger that broke');
    });
    const [a, b] = [connect(1), connect(2)];
    a.send({});
    b.send({});
    await watch.tick();
    advance(1_000);
    await watch.tick();
    expect([a.destroyed.length, b.destroyed.length]).toEqual([1, 1]);
    expect(abandoned).toHaveLength(2);
    watch.stop();
  });

  it('acts on no verdict that arrives after it was stopped', async () => {
    let release: () => void = () => undefined;
    const { watch, connect, abandoned, advance } = setup(() => new Promise((resolve) => (release = () => resolve(BackendState.gone))));
    const c = connect(7);
    c.send({});
    await watch.tick();
    advance(1_000);
    const ticking = watch.tick();
    watch.stop();
    release();
    await ticking;
    expect(c.destroyed).toEqual([]);
    expect(abandoned).toEqual([]);
  });

  it('gives no verdict when the probe itself fails, so only a timeout closes for want of an answer', async () => {
    const { watch, stalled } = setup(async () => {
      throw new Error('getaddrinfo EAI_AGAIN db');
    });
    const c = await stalled(7);
    expect(c.destroyed).toEqual([]);
    watch.stop();
  });
});

describe('the probe of backends', () => {
  const blockFor = (ms: number) => {
    const until = performance.now() + ms;
    while (performance.now() < until);
  };

  it('reads each backend as working, answered or absent from what the server lists', async () => {
    const fake = await startFakePostgres({ toldPid: () => 100, rows: (self) => [[self, 'active', self], [7, 'active', self], [8, 'idle in transaction', self], [9, 'idle', self], [10, null, self]] });
    try {
      const answer = await probeBackends(fake.url, [7, 8, 9, 10, 11], 2_000);
      if (typeof answer === 'string') throw new Error(`expected states, got ${answer}`);
      expect(Object.fromEntries(answer.states)).toEqual({ 7: 'working', 8: 'answered', 9: 'answered', 10: 'unknown' });
      expect(answer.server).toBe(`127.0.0.1:${new URL(fake.url).port}`);
    } finally {
      await fake.close();
    }
  });

  it('gives no verdict behind a pooler, whose sessions are not told the pid of their backend', async () => {
    const fake = await startFakePostgres({ toldPid: (session) => 5_000 + session, rows: () => [[42, 'active', 42]] });
    try {
      expect(await probeBackends(fake.url, [7], 2_000)).toBe(BackendState.unknown);
    } finally {
      await fake.close();
    }
  });

  it('says unreachable when the server sends not one byte in time, and gives no verdict when it spoke but too slowly', async () => {
    const silent = await startSilentServer();
    const slow = await startFakePostgres({ toldPid: () => 100, rows: () => 'hang' });
    try {
      expect(await probeBackends(silent.url, [7], 1_000)).toBe(BackendState.unreachable);
      // It logged the probe in and then sat on its question: an overloaded server, not a black hole.
      expect(await probeBackends(slow.url, [7], 1_000)).toBe(BackendState.unknown);
    } finally {
      await silent.close();
      await slow.close();
    }
  });

  it('gives no verdict when this process was paused while the probe ran, since the answer may sit unread', async () => {
    const fake = await startSilentServer();
    try {
      const probing = probeBackends(fake.url, [7], 1_000);
      blockFor(2_500);
      expect(await probing).toBe(BackendState.unknown);
    } finally {
      await fake.close();
    }
  });

  it('gives no verdict when the server refuses the connection, which a timeout is not', async () => {
    const fake = await startFakePostgres({ toldPid: () => 100, rows: () => [] });
    const url = fake.url;
    await fake.close();
    expect(await probeBackends(url, [7], 2_000)).toBe(BackendState.unknown);
  });
});
