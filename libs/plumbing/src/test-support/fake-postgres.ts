import { createServer, type AddressInfo, type Socket } from 'node:net';

export interface FakePostgresOptions {
  /** The process id each new session is told (BackendKeyData). */
  readonly toldPid: (session: number) => number;
  /** The rows of every parameterised query, as (pid, state, self) text columns; `hang` never answers. */
  readonly rows: (toldPid: number) => readonly (readonly [number, string | null, number])[] | 'hang';
}

/**
 * Just enough of PostgreSQL's wire protocol (trust login, one extended-protocol query shape) for
 * unit tests of what a client does with the answers: a pooler's pids, a server that never answers.
 * Integration tests use the real server.
 */
export async function startFakePostgres(options: FakePostgresOptions): Promise<FakeServer> {
  let sessions = 0;
  const message = (type: string, body: Buffer) => {
    const head = Buffer.alloc(5);
    head.write(type, 0);
    head.writeInt32BE(body.length + 4, 1);
    return Buffer.concat([head, body]);
  };
  const int32 = (n: number) => Buffer.from([n >>> 24, (n >>> 16) & 255, (n >>> 8) & 255, n & 255]);
  const int16 = (n: number) => Buffer.from([(n >>> 8) & 255, n & 255]);
  const cstring = (text: string) => Buffer.concat([Buffer.from(text), Buffer.from([0])]);
  const text = (value: string | null) => (value === null ? int32(-1) : Buffer.concat([int32(Buffer.byteLength(value)), Buffer.from(value)]));
  const field = (name: string, oid: number) => Buffer.concat([cstring(name), int32(0), int16(0), int32(oid), int16(-1 & 0xffff), int32(-1), int16(0)]);
  return serve((socket) => {
    const told = options.toldPid(++sessions);
    let buffer = Buffer.alloc(0);
    let started = false;
    socket.on('data', (chunk) => {
      buffer = Buffer.concat([buffer, chunk]);
      for (;;) {
        if (!started) {
          if (buffer.length < 4 || buffer.length < buffer.readInt32BE(0)) return;
          buffer = buffer.subarray(buffer.readInt32BE(0));
          started = true;
          socket.write(Buffer.concat([message('R', int32(0)), message('K', Buffer.concat([int32(told), int32(1)])), message('Z', Buffer.from('I'))]));
          continue;
        }
        if (buffer.length < 5 || buffer.length < buffer.readInt32BE(1) + 1) return;
        const type = String.fromCharCode(buffer[0]!);
        buffer = buffer.subarray(buffer.readInt32BE(1) + 1);
        if (type === 'X') return void socket.end();
        if (type === 'Q') socket.write(Buffer.concat([message('C', cstring('SELECT 0')), message('Z', Buffer.from('I'))]));
        if (type !== 'S') continue;
        const rows = options.rows(told);
        if (rows === 'hang') continue;
        const parts = [message('1', Buffer.alloc(0)), message('2', Buffer.alloc(0)), message('T', Buffer.concat([int16(3), field('pid', 23), field('state', 25), field('self', 23)]))];
        for (const [pid, state, self] of rows) parts.push(message('D', Buffer.concat([int16(3), text(String(pid)), text(state), text(String(self))])));
        parts.push(message('C', cstring(`SELECT ${rows.length}`)), message('Z', Buffer.from('I')));
        socket.write(Buffer.concat(parts));
      }
    });
  });
}

export interface FakeServer {
  readonly url: string;
  close(): Promise<void>;
}

/** A server that accepts connections and never sends a byte: a black hole as the client sees it. */
export const startSilentServer = (): Promise<FakeServer> => serve((socket) => void socket.resume());

/** Listens on a spare port of 127.0.0.1 and destroys every connection it took on close. */
async function serve(onSocket: (socket: Socket) => void): Promise<FakeServer> {
  const sockets = new Set<Socket>();
  const server = createServer((socket) => {
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
    socket.on('error', () => undefined);
    onSocket(socket);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', () => resolve()));
  return {
    url: `postgres://fake@127.0.0.1:${(server.address() as AddressInfo).port}/fake`,
    close: async () => {
      for (const socket of sockets) socket.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
