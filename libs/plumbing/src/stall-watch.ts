import pg from 'pg';
import { PlumbingError, PlumbingErrors, requirePositiveInteger } from './errors';

/** What the server says of a backend one of our connections waits on. */
export const BackendState = {
  /** Still running our statement (or waiting for a lock): a long query, not a lost one. */
  working: 'working',
  /** Idle, or idle in a transaction, while we wait for its answer: the answer was lost on the way. */
  answered: 'answered',
  /** No such backend: the server restarted, failed over, or ended the session without telling us. */
  gone: 'gone',
  /** The probe's server sent not one byte in time: a partition, a black hole, a host that is down. */
  unreachable: 'unreachable',
  /**
   * No verdict: the server answered the probe with an error (too many connections, a login
   * refused), the probe failed short of a timeout (DNS, TLS, a refused connection), the server
   * spoke but too slowly (an overloaded login), a pooler or proxy stands between (the probe's
   * backend is not the one it was told), the probe reached another server than the stalled
   * connection did, or this process was itself paused while the probe ran.
   */
  unknown: 'unknown',
} as const;
export type BackendState = (typeof BackendState)[keyof typeof BackendState];

/** Whether a stalled connection is closed: only on a verdict that the answer is not coming. */
export const abandonsConnection = (state: BackendState): boolean => state === BackendState.answered || state === BackendState.gone || state === BackendState.unreachable;

/** The default of `probeTimeoutMs`. */
export const STALL_PROBE_TIMEOUT_MS = 5_000;

/**
 * What a probe learnt: each asked backend's state (a pid the server does not list is gone) on the
 * server at `server` (`address:port` of the probe's socket), or one state for all.
 */
export type ProbeAnswer = { readonly states: ReadonlyMap<number, BackendState>; readonly server: string | undefined } | BackendState;

export interface StallWatchOptions {
  /** The pool's server, for the probe's own short-lived connection (same address, same role). */
  readonly connectionString: string;
  /** A checked-out connection with no answer to its statement, and no bytes moving, for this long is looked into. */
  readonly stallMs: number;
  /** How long the probe may take, connect included; a probe that times out says unreachable. Default STALL_PROBE_TIMEOUT_MS. */
  readonly probeTimeoutMs?: number;
  /** Told of each connection closed, with the verdict and how long it had waited. A throw is ignored. */
  readonly onAbandon?: (event: { readonly pid: number | null; readonly state: BackendState; readonly waitedMs: number }) => void;
  /** The server's answer about these backends; injected by unit tests. Default: `probeBackends`. */
  readonly probe?: (pids: readonly number[]) => Promise<ProbeAnswer>;
  /** Ends the sessions whose answer was lost, so none holds its locks meanwhile; injected by unit tests. Default: `terminateBackends`. */
  readonly terminate?: (pids: readonly number[]) => Promise<void>;
  /** Milliseconds now; injected by unit tests. */
  readonly now?: () => number;
  /** Whether an interval calls `tick`; unit tests call it themselves. Default true. */
  readonly interval?: boolean;
}

export interface StallWatch {
  /** One look at the pool's connections; the interval calls it, and unit tests do. */
  tick(): Promise<void>;
  stop(): void;
}

/** pg's own fields this relies on: pinned by `stall-watch.unit.spec.ts`, so an upgrade that moves them fails a test. */
interface PgClientInternals {
  readonly processID: number | null;
  _getActiveQuery?: () => unknown;
  readonly connection?: { readonly stream?: { destroy(error?: Error): void; readonly bytesRead?: number; readonly bytesWritten?: number; readonly remoteAddress?: string; readonly remotePort?: number } };
}

const internals = (client: pg.PoolClient | pg.Client): PgClientInternals => client as unknown as PgClientInternals;

/** Bytes moved on the connection's socket either way: a statement whose bytes move is not stalled. */
const traffic = (client: pg.PoolClient): number => {
  const stream = internals(client).connection?.stream;
  return (stream?.bytesRead ?? 0) + (stream?.bytesWritten ?? 0);
};

/** The server a client's socket is connected to, as `address:port`. */
const serverOf = (client: pg.PoolClient | pg.Client): string | undefined => {
  const stream = internals(client).connection?.stream;
  return stream?.remoteAddress === undefined ? undefined : `${stream.remoteAddress}:${stream.remotePort ?? ''}`;
};

/** Lets the I/O that arrived while this process could not run (a pause, a long task) be read first. */
const afterPendingIo = () => new Promise<void>((resolve) => setImmediate(resolve));

/**
 * Bounds how long a pool connection may wait for an answer that is not coming.
 *
 * A server that vanished without a reset (a failover that moved the address, a partition, a
 * frozen VM) leaves a statement in flight with unacknowledged bytes on the socket: TCP keepalive
 * never fires then, and the kernel's retransmissions take about 15 minutes to give up. For those
 * minutes a consumer stops, and every request on that connection hangs.
 *
 * A fixed query timeout would cut legitimate long work too (a VACUUM, a migration, a lock wait),
 * and a server-side `statement_timeout` cannot help when the server is out of reach. So a
 * connection that has waited `stallMs` for one statement, with no byte moving on its socket, is
 * not closed on time alone: a fresh connection asks the server about its backend. Still working,
 * or no clear verdict: wait on and ask again a stall later. Idle (the answer was lost; the session
 * is ended too, so it holds no locks), gone (the server restarted or failed over), or a probe that
 * timed out: the connection is destroyed, its statements fail with CONNECTION_STALLED (transient,
 * so consumers retry and requests answer 503), and the pool opens a new one.
 *
 * The check costs nothing per query: an interval looks at the checked-out connections' active
 * statement, and only a stall opens a connection. Behind a pooler or proxy (PgBouncer in any mode)
 * the process id a client was told is not its backend's: the probe sees that and gives no verdict,
 * so the watch then never closes anything.
 */
export function watchStalledConnections(pool: pg.Pool, options: StallWatchOptions): StallWatch {
  requirePositiveInteger('stallMs', options.stallMs);
  const probeTimeoutMs = options.probeTimeoutMs ?? STALL_PROBE_TIMEOUT_MS;
  requirePositiveInteger('probeTimeoutMs', probeTimeoutMs);
  const now = options.now ?? (() => performance.now());
  const probe = options.probe ?? ((pids: readonly number[]) => probeBackends(options.connectionString, pids, probeTimeoutMs));
  const terminate = options.terminate ?? ((pids: readonly number[]) => terminateBackends(options.connectionString, pids, probeTimeoutMs));
  const clients = new Set<pg.PoolClient>();
  // Per connection: the statement it waits on, the bytes moved so far, since when nothing moved,
  // and when to look into it (again).
  const seen = new WeakMap<pg.PoolClient, { readonly statement: unknown; bytes: number; since: number; checkAt: number }>();
  pool.on('connect', (client) => void clients.add(client));
  pool.on('remove', (client) => void clients.delete(client));
  let probing = false;
  let stopped = false;

  const stalled = (): pg.PoolClient[] => {
    const at = now();
    const found: pg.PoolClient[] = [];
    for (const client of clients) {
      const statement = internals(client)._getActiveQuery?.() ?? null;
      const bytes = traffic(client);
      const last = seen.get(client);
      if (statement === null) seen.delete(client);
      else if (last?.statement !== statement || last.bytes !== bytes) seen.set(client, { statement, bytes, since: at, checkAt: at + options.stallMs });
      else if (at >= last.checkAt) found.push(client);
    }
    return found;
  };

  /** Still waiting on the same statement, with nothing moved, after the probe? */
  const stillStalled = (client: pg.PoolClient) => {
    const last = seen.get(client);
    return last !== undefined && internals(client)._getActiveQuery?.() === last.statement && traffic(client) === last.bytes ? last : undefined;
  };

  const abandon = (client: pg.PoolClient, state: BackendState, since: number) => {
    const pid = internals(client).processID;
    const waitedMs = Math.round(now() - since);
    const why =
      state === BackendState.answered
        ? 'is idle: its answer was lost on the way, and the statement may have completed (the session was ended too)'
        : state === BackendState.gone
          ? 'is gone (a restart, a failover, a session ended unheard)'
          : 'cannot be asked about (the server did not answer a new connection)';
    internals(client).connection?.stream?.destroy(
      new PlumbingError(PlumbingErrors.CONNECTION_STALLED, `no answer from PostgreSQL for ${waitedMs} ms and its backend ${pid ?? '?'} ${why}: the connection was closed`, { retriable: true, details: { pid, state } }),
    );
    seen.delete(client);
    try {
      options.onAbandon?.({ pid, state, waitedMs });
    } catch {
      // A log or a metric that fails must not keep the other stalled connections open.
    }
  };

  const tick = async (): Promise<void> => {
    if (stopped || probing) return;
    const waiting = stalled();
    if (waiting.length === 0) return;
    probing = true;
    try {
      const pids = waiting.map((c) => internals(c).processID).filter((p): p is number => typeof p === 'number');
      const answer = await probe(pids).catch((): BackendState => BackendState.unknown);
      await afterPendingIo();
      if (stopped) return;
      const lost: number[] = [];
      for (const client of waiting) {
        const pid = internals(client).processID;
        const state = stateOf(answer, pid, serverOf(client));
        // The answer, or some of it, may have come while the probe ran: then the connection is fine after all.
        const last = stillStalled(client);
        if (!last) continue;
        if (!abandonsConnection(state)) {
          // A long statement still at work is asked about again a stall later, not on every tick.
          last.checkAt = now() + options.stallMs;
          continue;
        }
        if (state === BackendState.answered && pid !== null) lost.push(pid);
        abandon(client, state, last.since);
      }
      // Ours closes its socket, but the news may be lost the way the answer was: a session left
      // idle in its transaction would hold its locks against the retry until the server's idle timeout.
      if (lost.length > 0) await terminate(lost).catch(() => undefined);
    } finally {
      probing = false;
    }
  };

  const timer = options.interval === false ? undefined : setInterval(() => void tick().catch(() => undefined), Math.max(50, Math.floor(options.stallMs / 4)));
  // Never what keeps a process alive: a pool that ends leaves nothing behind.
  timer?.unref();
  return {
    tick,
    stop: () => {
      stopped = true;
      clearInterval(timer);
    },
  };
}

/** A backend's state from a probe's answer, for a connection to `server`: only the server the probe reached can say. */
function stateOf(answer: ProbeAnswer, pid: number | null, server: string | undefined): BackendState {
  if (typeof answer === 'string') return answer;
  // Behind a TCP load balancer or DNS that moved, the probe may reach another server than this
  // connection did: a pid there says nothing of ours (and ending it would end a stranger's session).
  if (pid === null || answer.server === undefined || answer.server !== server) return BackendState.unknown;
  return answer.states.get(pid) ?? BackendState.gone;
}

/**
 * One short-lived connection for a question about other sessions, bounded by `timeoutMs` in all.
 * Out of time, the answer is `onTimeout` only when the server sent not one byte: one that spoke
 * (a slow login, an overloaded server) is there, and that is no black hole (`onError` then).
 */
async function withProbeClient<T>(connectionString: string, timeoutMs: number, onTimeout: T, onError: (error: unknown) => T, work: (client: pg.Client) => Promise<T>): Promise<T> {
  // pg's own connect timeout only as a backstop: the deadline below decides, by what arrived.
  const client = new pg.Client({ connectionString, connectionTimeoutMillis: timeoutMs * 2, keepAlive: false });
  client.on('error', () => undefined);
  let timer: NodeJS.Timeout | undefined;
  let timedOut = false;
  const startedAt = performance.now();
  const deadline = new Promise<T>((resolve) => {
    timer = setTimeout(() => {
      // A timer that fires far later than asked means this process could not run (SIGSTOP, a
      // frozen VM, a long synchronous task): the server may well have answered meanwhile, unread.
      const late = performance.now() - startedAt - timeoutMs > Math.max(100, timeoutMs / 2);
      // And what arrived just before the timer is read first: it may be the answer itself.
      setImmediate(() => {
        timedOut = true;
        const spoke = (internals(client).connection?.stream?.bytesRead ?? 0) > 0;
        resolve(late ? onError(new Error('the probe was paused')) : spoke ? onError(new Error('the server answered too slowly')) : onTimeout);
      });
    }, timeoutMs);
  });
  const ask = (async () => {
    try {
      await client.connect();
      return await work(client);
    } catch (error) {
      return onError(error);
    }
  })();
  try {
    return await Promise.race([ask, deadline]);
  } finally {
    clearTimeout(timer);
    // A probe into a black hole must leave no socket behind waiting for the kernel's timeout.
    if (timedOut) internals(client).connection?.stream?.destroy();
    void client.end().catch(() => undefined);
  }
}

/**
 * Asks the server, over a connection of its own, what each backend is doing. A map from pid to
 * state (a pid the server does not list is gone), or one state for all: unreachable when the
 * probe timed out, unknown when it could not say (an error, a pooler in between, a pause of ours).
 */
export async function probeBackends(connectionString: string, pids: readonly number[], timeoutMs: number): Promise<ProbeAnswer> {
  return withProbeClient<ProbeAnswer>(
    connectionString,
    timeoutMs,
    BackendState.unreachable,
    () => BackendState.unknown,
    async (client) => {
      const { rows } = await client.query<{ pid: number; state: string | null; self: number }>(
        'SELECT pid, state, pg_backend_pid() AS self FROM pg_stat_activity WHERE pid = ANY($1::int[]) OR pid = pg_backend_pid()',
        [pids],
      );
      // Behind a pooler or proxy the pid a client is told is not its backend's, so no pid can be
      // looked up: the server's own id for this session tells.
      const self = rows.find((r) => r.pid === r.self)?.self;
      if (self === undefined || self !== internals(client).processID) return BackendState.unknown;
      const states = new Map<number, BackendState>();
      // A state hidden from this role (NULL) is no evidence either way.
      for (const row of rows) if (row.pid !== self) states.set(row.pid, row.state === null ? BackendState.unknown : /^idle/.test(row.state) ? BackendState.answered : BackendState.working);
      return { states, server: serverOf(client) };
    },
  );
}

/** Ends these sessions (`pg_terminate_backend`, allowed for the role's own), over a connection of its own; best effort. */
export async function terminateBackends(connectionString: string, pids: readonly number[], timeoutMs: number): Promise<void> {
  await withProbeClient<void>(connectionString, timeoutMs, undefined, () => undefined, async (client) => {
    await client.query('SELECT pg_terminate_backend(pid) FROM unnest($1::int[]) AS pid', [pids]);
  });
}
