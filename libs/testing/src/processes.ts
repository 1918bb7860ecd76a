import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { promisify } from 'node:util';
import type { ServiceName } from '@labelflow/contracts';
import { repoRoot } from './infra';

const run = promisify(execFile);

export const serviceNames: readonly ServiceName[] = ['task-svc', 'label-svc', 'qa-svc', 'billing-svc'];

/** Every process a test can spawn: the four services, and the saga monitor that watches them. */
export type ProcessName = ServiceName | 'saga-monitor';

/** Bundles the services (esbuild, well under a second) so tests run what production runs. */
export async function buildServices(): Promise<void> {
  await run('node', ['scripts/build.mjs'], { cwd: repoRoot, timeout: 120_000 });
}

export interface ServiceProcess<N extends ProcessName = ServiceName> {
  readonly name: N;
  readonly url: string;
  /** Topic keys the service consumes (`task`, `label`, ...), as it reported at start. */
  readonly consumes: readonly string[];
  readonly child: ChildProcess;
  /** Resolves with the exit code or signal once the process is gone. */
  readonly exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  logs(): string;
  /** Graceful stop (SIGTERM), waits for exit. */
  stop(): Promise<void>;
  /** Crash (SIGKILL), waits for exit. */
  kill(): Promise<void>;
}

const MAX_LOG = 2_000_000;

/**
 * Spawns a built service on a free port (PORT=0) and resolves once it logs that it listens, which
 * it does only after its database, topics, relay and consumer are up.
 */
export function startServiceProcess<N extends ProcessName = ServiceName>(name: N, env: Record<string, string>, { timeoutMs = 60_000 } = {}): Promise<ServiceProcess<N>> {
  // LABELFLOW_CPU_PROF_DIR: every service a test or bench starts writes a V8 CPU profile there when it exits.
  const profile = process.env['LABELFLOW_CPU_PROF_DIR'] ? ['--cpu-prof', `--cpu-prof-dir=${process.env['LABELFLOW_CPU_PROF_DIR']}`] : [];
  const child = spawn(process.execPath, ['--enable-source-maps', ...profile, `dist/apps/${name}/main.js`], {
    cwd: repoRoot,
    env: { ...process.env, LOG_LEVEL: 'info', DB_REFUSE_NESTED_CONNECTIONS: 'true', ...env, PORT: '0', HOST: '127.0.0.1' },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let log = '';
  const append = (chunk: Buffer) => {
    log += chunk.toString();
    if (log.length > MAX_LOG) log = log.slice(-MAX_LOG / 2);
  };
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => child.once('exit', (code, signal) => resolve({ code, signal })));
  const handle = (url: string, consumes: readonly string[]): ServiceProcess<N> => ({
    name,
    url,
    consumes,
    child,
    exited,
    logs: () => log,
    stop: async () => {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
      await exited;
    },
    kill: async () => {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
      await exited;
    },
  });
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`${name} did not start within ${timeoutMs} ms; log tail:\n${log.slice(-4000)}`));
    }, timeoutMs);
    let pending = '';
    child.stdout?.on('data', (chunk: Buffer) => {
      append(chunk);
      pending += chunk.toString();
      const lines = pending.split('\n');
      pending = lines.pop() ?? '';
      for (const line of lines) {
        if (!line.includes(`"${name} listening"`)) continue;
        clearTimeout(timer);
        const listening = JSON.parse(line) as { url: string; topics?: string[] };
        resolve(handle(listening.url, listening.topics ?? []));
      }
    });
    child.stderr?.on('data', append);
    void exited.then(({ code, signal }) => {
      clearTimeout(timer);
      reject(new Error(`${name} exited (code ${code}, signal ${signal}) before listening; log tail:\n${log.slice(-4000)}`));
    });
  });
}
