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

/** Slices of the port range: one per vitest worker that can run at the same time, and then some. */
const SLICES = 8;

/** Ports this process handed out: it never hands out one twice, even once its server stopped. */
const handedOut = new Set<number>();

/**
 * The ports this process may hand out. Under vitest, each worker (VITEST_POOL_ID: distinct among
 * the workers running at once) draws from a slice of its own, so two test files running side by
 * side can never pick the same port, whatever each does with it between finding it free and
 * binding it (a script starting a server, a server stopped to be started again).
 */
function sliceOf(low: number, high: number): readonly [number, number] {
  const pool = Number(process.env['VITEST_POOL_ID']);
  if (!Number.isInteger(pool) || pool < 1) return [low, high];
  const size = Math.floor((high - low) / SLICES);
  const first = low + ((pool - 1) % SLICES) * size;
  return [first, first + size];
}

/**
 * `count` consecutive ports nobody listens on right now, between 20000 and the kernel's ephemeral
 * range (see ephemeralLow), well away from 3001-3005 (the stack `npm start` runs by default).
 */
export async function spareBase(count = 1): Promise<number> {
  const [low, high] = sliceOf(20_000, ephemeralLow());
  const span = high - low - count;
  for (let tries = 0; tries < 50; tries++) {
    const base = low + Math.floor(Math.random() * span);
    const ports = Array.from({ length: count }, (_, i) => base + i);
    if (ports.some((p) => handedOut.has(p))) continue;
    const free = await Promise.all(ports.map(portFree));
    // Checked again after the await: a concurrent call in this process may have taken one meanwhile.
    if (!free.every(Boolean) || ports.some((p) => handedOut.has(p))) continue;
    for (const p of ports) handedOut.add(p);
    return base;
  }
  throw new Error(`no ${count} consecutive free ports found in ${low}-${high}`);
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
