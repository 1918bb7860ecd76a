import { execFile } from 'node:child_process';
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { repoRoot, startPrivatePostgres, startPrivateRedis, type PrivateServer } from '@labelflow/testing';

const run = promisify(execFile);

/** Whether nothing listens on the port (we can bind it ourselves). */
function portFree(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const server = createServer();
    server.unref();
    server.once('error', () => resolve(false));
    server.listen(port, '127.0.0.1', () => server.close(() => resolve(true)));
  });
}

/**
 * A free port below the kernel's ephemeral range. The broker is stopped and started again on the
 * same port mid-run, and a port from the ephemeral range could meanwhile be handed to some
 * outgoing connection as its source port.
 */
async function stablePort(taken: ReadonlySet<number>): Promise<number> {
  let low = 32_768;
  try {
    low = Number(readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').trim().split(/\s+/)[0]) || low;
  } catch {
    // Not Linux: keep the usual default.
  }
  const from = 20_000;
  const to = Math.max(from + 1_000, low - 1);
  for (let i = 0; i < 200; i++) {
    const port = from + Math.floor(Math.random() * (to - from));
    if (!taken.has(port) && (await portFree(port)) && (await portFree(port + 1))) return port;
  }
  throw new Error(`no free port found between ${from} and ${to}`);
}

/** A broker of our own, through infra/local/kafka.sh (keyed by port and instance directory). */
export interface PrivateKafka {
  readonly brokers: string;
  readonly port: number;
  readonly dir: string;
  start(): Promise<void>;
  stop(): Promise<void>;
  /** Stops it (bounded) and deletes its directory. */
  destroy(): Promise<void>;
  /** Copies its logs to `dir` (before `destroy` deletes them). */
  keepLogs(dir: string): void;
}

export async function startPrivateKafka(): Promise<PrivateKafka> {
  const port = await stablePort(new Set());
  const controllerPort = await stablePort(new Set([port, port + 1]));
  const dir = mkdtempSync(join(tmpdir(), 'lf-chaos-kafka-'));
  const localDir = process.env.LABELFLOW_LOCAL_DIR ?? join(repoRoot, '.local');
  const env = {
    ...process.env,
    KAFKA_PORT: String(port),
    KAFKA_CONTROLLER_PORT: String(controllerPort),
    KAFKA_INSTANCE_DIR: join(dir, 'instance'),
    // The jars are shared with the machine's broker (installed once); everything else is ours.
    KAFKA_LIBS: process.env.KAFKA_LIBS ?? join(localDir, 'kafka/libs'),
    // Its "started" marker goes to our directory, so `infra/local/stack.sh down` never sees it.
    LABELFLOW_LOCAL_DIR: join(dir, 'local'),
    KAFKA_STOP_SECONDS: '20',
    KAFKA_WAIT_SECONDS: '120',
  };
  const sh = async (command: 'start' | 'stop') => {
    // kafka.sh installs the jars on first use, which can take minutes; after that a start takes seconds.
    await run('bash', [join(repoRoot, 'infra/local/kafka.sh'), command], { env, timeout: command === 'start' ? 15 * 60_000 : 60_000, maxBuffer: 16 * 1024 * 1024 });
  };
  const kafka: PrivateKafka = {
    brokers: `127.0.0.1:${port}`,
    port,
    dir,
    start: () => sh('start'),
    stop: () => sh('stop'),
    destroy: async () => {
      await sh('stop').catch(() => undefined);
      rmSync(dir, { recursive: true, force: true });
    },
    keepLogs: (to) => {
      const logs = join(dir, 'instance/logs');
      mkdirSync(to, { recursive: true });
      for (const f of ['server.log', 'kafka.out']) if (existsSync(join(logs, f))) copyFileSync(join(logs, f), join(to, `kafka-${f}`));
    },
  };
  try {
    await kafka.start();
  } catch (error) {
    await kafka.destroy();
    throw error;
  }
  return kafka;
}

/** The run's own Kafka, PostgreSQL and Redis: none of them shared with anyone. */
export interface PrivateInfra {
  readonly kafka: PrivateKafka;
  readonly postgres: PrivateServer;
  readonly redis: PrivateServer;
  /** Stops all three and deletes their files; never throws. */
  destroy(logDir?: string): Promise<void>;
}

/** Starts the three servers side by side; if one fails, the others are removed again. */
export async function startPrivateInfra(): Promise<PrivateInfra> {
  const [kafka, postgres, redis] = await Promise.allSettled([startPrivateKafka(), startPrivatePostgres(), startPrivateRedis()]);
  const started = { kafka: kafka.status === 'fulfilled' ? kafka.value : undefined, postgres: postgres.status === 'fulfilled' ? postgres.value : undefined, redis: redis.status === 'fulfilled' ? redis.value : undefined };
  const destroy = async (logDir?: string) => {
    if (logDir) {
      try {
        started.kafka?.keepLogs(logDir);
      } catch {
        // Logs are a courtesy; cleaning up is not.
      }
    }
    await Promise.allSettled([started.kafka?.destroy(), started.postgres?.destroy(), started.redis?.destroy()]);
  };
  if (!started.kafka || !started.postgres || !started.redis) {
    const failed = [kafka, postgres, redis].find((r): r is PromiseRejectedResult => r.status === 'rejected');
    await destroy();
    throw new Error(`could not start the private infrastructure: ${(failed?.reason as Error | undefined)?.message ?? 'unknown'}`);
  }
  return { kafka: started.kafka, postgres: started.postgres, redis: started.redis, destroy };
}
