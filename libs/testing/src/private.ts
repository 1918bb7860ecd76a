import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { repoRoot } from './infra';

const run = promisify(execFile);

/** A port nobody listens on right now (the kernel picks it). */
export async function sparePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.unref();
    server.on('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      server.close(() => (typeof address === 'object' && address ? resolve(address.port) : reject(new Error('no port'))));
    });
  });
}

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
