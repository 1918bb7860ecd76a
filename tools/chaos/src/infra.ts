import { execFile } from 'node:child_process';
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { repoRoot, spareBase, sparePort, startPrivatePostgres, startPrivateRedis, type PrivateServer } from '@labelflow/testing';

const run = promisify(execFile);

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
  // Below the ephemeral range and from this worker's own slice (libs/testing): the broker is
  // stopped and started again on the same port mid-run, and meanwhile neither an outgoing
  // connection nor the other test worker may take it.
  const port = await spareBase(2);
  const controllerPort = await sparePort();
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
    // A stranger on the port after a restart fails the start instead of passing for ours.
    KAFKA_REQUIRE_OWN: '1',
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
