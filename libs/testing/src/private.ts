import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { repoRoot } from './infra';

const run = promisify(execFile);

const portFree = (port: number) =>
  new Promise<boolean>((resolve) => {
    const server = createServer();
    server.unref();
    server.once('error', () => resolve(false));
    server.listen(port, '127.0.0.1', () => server.close(() => resolve(true)));
  });

/**
 * The lowest port the kernel hands out on its own, to outgoing connections and to `listen(0)`.
 * A server started by a script binds its port long after the port was found free, and stops and
 * starts again on it; below this bound nothing else in the test run (the other worker's
 * connections, in-process servers on port 0) can take it meanwhile.
 */
function ephemeralLow(): number {
  try {
    const low = Number(readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').trim().split(/\s+/)[0]);
    return Number.isInteger(low) && low > 20_100 ? low : 32_768;
  } catch {
    return 32_768;
  }
}

/**
 * `count` consecutive ports nobody listens on right now, between 20000 and the kernel's ephemeral
 * range (see ephemeralLow), well away from 3001-3005 (the stack `npm start` runs by default).
 */
export async function spareBase(count = 1): Promise<number> {
  const span = ephemeralLow() - 20_000 - count;
  for (let tries = 0; tries < 50; tries++) {
    const base = 20_000 + Math.floor(Math.random() * span);
    const free = await Promise.all(Array.from({ length: count }, (_, i) => portFree(base + i)));
    if (free.every(Boolean)) return base;
  }
  throw new Error(`no ${count} consecutive free ports found below the ephemeral range`);
}

/** A port nobody listens on right now, outside the range the kernel hands out on its own. */
export const sparePort = (): Promise<number> => spareBase(1);

/**
 * A private server on a spare port, for tests that stop, crash or flush it: the machine's shared
 * servers, other tests and later CI runs never notice.
 */
export interface PrivateServer {
  readonly port: number;
  readonly url: string;
  /** Stops it; `crash` kills it like a power cut instead of a clean shutdown. */
  stop(options?: { crash?: boolean }): Promise<void>;
  /** Starts it again on the same port (and, for PostgreSQL, the same data). */
  start(): Promise<void>;
  /** Stops it and deletes its files. */
  destroy(): Promise<void>;
}

async function privateServer(kind: 'redis' | 'postgres', url: (port: number) => string, crashMode: string, cleanMode: string): Promise<PrivateServer> {
  const port = await sparePort();
  const dir = mkdtempSync(join(tmpdir(), `lf-${kind}-`));
  const script = join(repoRoot, `infra/local/${kind}.sh`);
  const sh = (...args: string[]) => run('bash', [script, ...args, '--port', String(port), '--dir', dir], { timeout: 120_000 });
  const server: PrivateServer = {
    port,
    url: url(port),
    start: async () => void (await sh('start-instance')),
    stop: async ({ crash = false } = {}) => void (await sh('stop-instance', '--mode', crash ? crashMode : cleanMode)),
    destroy: async () => {
      await sh('stop-instance', '--mode', crashMode).catch(() => undefined);
      rmSync(dir, { recursive: true, force: true });
    },
  };
  await server.start();
  return server;
}

export const startPrivateRedis = () => privateServer('redis', (p) => `redis://127.0.0.1:${p}`, 'kill', 'nosave');
export const startPrivatePostgres = () => privateServer('postgres', (p) => `postgres://postgres@127.0.0.1:${p}`, 'immediate', 'fast');
