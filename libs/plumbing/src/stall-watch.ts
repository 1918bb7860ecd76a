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
  /** The probe got no answer at all (a partition, a black hole, a host that is down). */
  unreachable: 'unreachable',
  /** The server answered the probe with an error (too many connections, a login refused): no verdict. */
  unknown: 'unknown',
} as const;
export type BackendState = (typeof BackendState)[keyof typeof BackendState];

/** Whether a stalled connection is closed: only on a verdict that the answer is not coming. */
export const abandonsConnection = (state: BackendState): boolean => state === BackendState.answered || state === BackendState.gone || state === BackendState.unreachable;

export interface StallWatchOptions {
  /** The pool's server, for the probe's own short-lived connection (same address, same role). */
  readonly connectionString: string;
  /** A checked-out connection with no answer to its statement for this long is looked into. */
  readonly stallMs: number;
  /** How long the probe may take, connect included; no answer in time means unreachable. Default min(stallMs, 5 s). */
  readonly probeTimeoutMs?: number;
  /** Told of each connection closed, with the verdict and how long it had waited. */
  readonly onAbandon?: (event: { readonly pid: number | null; readonly state: BackendState; readonly waitedMs: number }) => void;
  /** The server's answer about these backends; injected by unit tests. Default: `probeBackends`. */
  readonly probe?: (pids: readonly number[]) => Promise<ReadonlyMap<number, BackendState> | BackendState>;
  /** Milliseconds now; injected by unit tests. */
  readonly now?: () => number;
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
  readonly connection?: { readonly stream?: { destroy(error?: Error): void } };
}

const internals = (client: pg.PoolClient): PgClientInternals => client as unknown as PgClientInternals;

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
 * connection that has waited `stallMs` for one statement is not closed on time alone: a fresh
 * connection asks the server about its backend. Still working: wait on and ask again later. Idle
 * (the answer was lost), gone (the server restarted or failed over), or no answer to the probe
 * either: the connection is destroyed, its statements fail with CONNECTION_STALLED (transient,
 * so consumers retry and requests answer 503), and the pool opens a new one.
 *
 * The check costs nothing per query: an interval looks at the checked-out connections' active
 * statement, and only a stall opens a connection. Behind a transaction-mode pooler (PgBouncer)
 * the backend a client talks to changes, so leave it off there (`stallMs` 0 in `createPool`).
 */
export function watchStalledConnections(pool: pg.Pool, options: StallWatchOptions): StallWatch {
  requirePositiveInteger('stallMs', options.stallMs);
  const probeTimeoutMs = options.probeTimeoutMs ?? Math.min(options.stallMs, 5_000);
  requirePositiveInteger('probeTimeoutMs', probeTimeoutMs);
  const now = options.now ?? (() => performance.now());
  const probe = options.probe ?? ((pids: readonly number[]) => probeBackends(options.connectionString, pids, probeTimeoutMs));
  const clients = new Set<pg.PoolClient>();
  // Per connection: the statement it waits on, since when, and when to look into it (again).
  const seen = new WeakMap<pg.PoolClient, { readonly statement: unknown; readonly since: number; checkAt: number }>();
  pool.on('connect', (client) => void clients.add(client));
  pool.on('remove', (client) => void clients.delete(client));
  let probing = false;
  let stopped = false;

  const stalled = (): pg.PoolClient[] => {
    const at = now();
    const found: pg.PoolClient[] = [];
    for (const client of clients) {
      const statement = internals(client)._getActiveQuery?.() ?? null;
      const last = seen.get(client);
      if (statement === null) seen.delete(client);
      else if (last?.statement !== statement) seen.set(client, { statement, since: at, checkAt: at + options.stallMs });
      else if (at >= last.checkAt) found.push(client);
    }
    return found;
  };

  const tick = async (): Promise<void> => {
    if (stopped || probing || (pool as pg.Pool & { ending?: boolean }).ending) return;
    const waiting = stalled();
    if (waiting.length === 0) return;
    probing = true;
    try {
      const pids = waiting.map((c) => internals(c).processID).filter((p): p is number => typeof p === 'number');
      const answer = await probe(pids).catch((): BackendState => BackendState.unreachable);
      for (const client of waiting) {
        const pid = internals(client).processID;
        const state = answer instanceof Map ? (pid === null ? BackendState.unknown : (answer.get(pid) ?? BackendState.gone)) : (answer as BackendState);
        const last = seen.get(client);
        // The answer may have come while the probe ran: then the connection is fine after all.
        if (!last || internals(client)._getActiveQuery?.() !== last.statement) continue;
        // A long statement still at work is asked about again a stall later, not on every tick.
        if (!abandonsConnection(state)) {
          last.checkAt = now() + options.stallMs;
          continue;
        }
        const waitedMs = Math.round(now() - last.since);
        internals(client).connection?.stream?.destroy(
          new PlumbingError(PlumbingErrors.CONNECTION_STALLED, `no answer from PostgreSQL for ${waitedMs} ms and its backend ${pid ?? '?'} is ${state}: the connection was closed`, { retriable: true }),
        );
        seen.delete(client);
        options.onAbandon?.({ pid, state, waitedMs });
      }
    } finally {
      probing = false;
    }
  };

  const timer = setInterval(() => void tick(), Math.max(50, Math.floor(options.stallMs / 4)));
  // Never what keeps a process alive: a pool that ends leaves nothing behind.
  timer.unref();
  return {
    tick,
    stop: () => {
      stopped = true;
      clearInterval(timer);
    },
  };
}

/**
 * Asks the server, over a connection of its own, what each backend is doing. A map from pid to
 * state (a pid the server does not list is gone), or one state for all when the server could not
 * be asked: unreachable when it did not answer in time, unknown when it answered with an error.
 */
export async function probeBackends(connectionString: string, pids: readonly number[], timeoutMs: number): Promise<ReadonlyMap<number, BackendState> | BackendState> {
  const client = new pg.Client({ connectionString, connectionTimeoutMillis: timeoutMs, keepAlive: false });
  client.on('error', () => undefined);
  let timer: NodeJS.Timeout | undefined;
  const deadline = new Promise<BackendState>((resolve) => {
    timer = setTimeout(() => resolve(BackendState.unreachable), timeoutMs);
  });
  const ask = (async (): Promise<ReadonlyMap<number, BackendState> | BackendState> => {
    try {
      await client.connect();
      const { rows } = await client.query<{ pid: number; state: string | null }>('SELECT pid, state FROM pg_stat_activity WHERE pid = ANY($1::int[])', [pids]);
      const states = new Map<number, BackendState>();
      // A state hidden from this role (NULL) is no evidence either way.
      for (const row of rows) states.set(row.pid, row.state === null ? BackendState.unknown : /^idle/.test(row.state) ? BackendState.answered : BackendState.working);
      return states;
    } catch (error) {
      // A SQLSTATE means the server spoke: it is there, just not answering this question.
      return typeof (error as { code?: unknown }).code === 'string' && /^[0-9A-Z]{5}$/.test((error as { code: string }).code) ? BackendState.unknown : BackendState.unreachable;
    }
  })();
  try {
    return await Promise.race([ask, deadline]);
  } finally {
    clearTimeout(timer);
    // pg destroys the socket of a client ended with a statement in flight (or still connecting,
    // through connectionTimeoutMillis), so a probe into a black hole leaves nothing behind.
    void client.end().catch(() => undefined);
  }
}
