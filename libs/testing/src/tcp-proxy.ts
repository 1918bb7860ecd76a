import { createServer, connect, type AddressInfo, type Socket } from 'node:net';

/** Which connections a silenced proxy stops passing bytes for. */
export type Silence = 'open' | 'all';
/** Which way: both, or only the server's answers (a request arrives, its answer is lost). */
export type SilenceDirection = 'both' | 'answers';

export interface TcpProxy {
  /** The proxy's port on 127.0.0.1: point the client at it instead of the server. */
  readonly port: number;
  /**
   * Stops passing bytes, both ways, without closing anything: what a black hole, a partition or a
   * failover that moved the address looks like from the client (no reset, no answer, ever).
   * `'open'` silences the connections open now and lets new ones through (one connection lost
   * while the server is reachable); `'all'` also swallows every new one. With `'answers'` only the
   * server's side of the open connections goes silent: requests still arrive, answers are lost.
   */
  silence(which: Silence, direction?: SilenceDirection): void;
  /** Passes bytes again for connections opened from now on; silenced ones stay silent. */
  restore(): void;
  /** Connections accepted so far. */
  readonly accepted: number;
  close(): Promise<void>;
}

/**
 * A TCP proxy in the test process to a real server, for faults a test cannot ask of the server
 * itself: a connection that goes silent without a reset. Bytes read while silent are dropped.
 */
export async function startTcpProxy(target: { readonly host: string; readonly port: number }): Promise<TcpProxy> {
  const sockets = new Set<Socket>();
  /** The server side of each connection, for silencing answers only. */
  const upstreams = new Set<Socket>();
  const silenced = new WeakSet<Socket>();
  let swallowNew = false;
  let accepted = 0;
  const track = (socket: Socket) => {
    sockets.add(socket);
    // Errors of a side the test broke on purpose are expected; the client sees what it sees.
    socket.on('error', () => socket.destroy());
    socket.on('close', () => sockets.delete(socket));
  };
  const pipe = (from: Socket, to: Socket) => {
    from.on('data', (chunk) => {
      if (!silenced.has(from)) to.write(chunk);
    });
    from.on('end', () => {
      if (!silenced.has(from)) to.end();
    });
  };
  const server = createServer((client) => {
    accepted += 1;
    track(client);
    if (swallowNew) {
      silenced.add(client);
      client.resume();
      return;
    }
    const upstream = connect(target.port, target.host);
    track(upstream);
    upstreams.add(upstream);
    upstream.on('close', () => upstreams.delete(upstream));
    // A silenced side's end is news the other side must not hear either.
    client.on('close', () => silenced.has(client) || upstream.destroy());
    upstream.on('close', () => silenced.has(upstream) || client.destroy());
    pipe(client, upstream);
    pipe(upstream, client);
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => resolve());
  });
  return {
    port: (server.address() as AddressInfo).port,
    get accepted() {
      return accepted;
    },
    silence(which, direction = 'both') {
      for (const socket of direction === 'both' ? sockets : upstreams) silenced.add(socket);
      swallowNew = which === 'all';
    },
    restore() {
      swallowNew = false;
    },
    async close() {
      for (const socket of sockets) socket.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
