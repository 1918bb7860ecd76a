import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';

const run = promisify(execFile);

/** Where the real services of a test run live. */
export interface TestInfra {
  readonly kafkaBrokers: string;
  /** Server URL without a database; tests create their own databases on it. */
  readonly pgUrl: string;
  readonly redisUrl: string;
  /** How they were obtained, for the run's log. */
  readonly source: 'env' | 'testcontainers' | 'stack-script';
}

export const repoRoot = fileURLToPath(new URL('../../../', import.meta.url));

export interface Teardown {
  (): Promise<void>;
}

/**
 * Resolves the infrastructure once per run: URLs from the environment when given (CI and the test
 * script set them); otherwise testcontainers when a Docker engine answers; otherwise the project's
 * own stack script, which installs and starts Kafka, PostgreSQL and Redis on this machine.
 */
export async function resolveInfra(env: NodeJS.ProcessEnv = process.env): Promise<{ infra: TestInfra; teardown: Teardown }> {
  const { KAFKA_BROKERS, PG_URL, REDIS_URL } = env;
  if (KAFKA_BROKERS && PG_URL && REDIS_URL) {
    return { infra: { kafkaBrokers: KAFKA_BROKERS, pgUrl: PG_URL, redisUrl: REDIS_URL, source: 'env' }, teardown: async () => undefined };
  }
  if (await dockerAnswers()) return startContainers();
  return startWithStackScript();
}

async function dockerAnswers(): Promise<boolean> {
  if (!existsSync('/var/run/docker.sock') && !process.env.DOCKER_HOST) return false;
  try {
    await run('docker', ['info', '--format', '{{.ServerVersion}}'], { timeout: 5_000 });
    return true;
  } catch {
    return false;
  }
}

async function startContainers(): Promise<{ infra: TestInfra; teardown: Teardown }> {
  const { KafkaContainer } = await import('@testcontainers/kafka');
  const { PostgreSqlContainer } = await import('@testcontainers/postgresql');
  const { RedisContainer } = await import('@testcontainers/redis');
  // Confluent Platform 7.9 ships Apache Kafka 3.9; KafkaContainer wires the advertised listener to
  // the mapped host port, which a plain container cannot know before it starts.
  const kafka = await new KafkaContainer('confluentinc/cp-kafka:7.9.0').withKraft().start();
  const postgres = await new PostgreSqlContainer('postgres:16').withUsername('postgres').withPassword('postgres').start();
  const redis = await new RedisContainer('redis:7').start();
  const brokers = `${kafka.getHost()}:${kafka.getMappedPort(9093)}`;
  const pgUrl = `postgres://postgres:postgres@${postgres.getHost()}:${postgres.getPort()}`;
  return {
    infra: { kafkaBrokers: brokers, pgUrl, redisUrl: redis.getConnectionUrl(), source: 'testcontainers' },
    teardown: async () => {
      await Promise.allSettled([kafka.stop(), postgres.stop(), redis.stop()]);
    },
  };
}

async function startWithStackScript(): Promise<{ infra: TestInfra; teardown: Teardown }> {
  const script = `${repoRoot}infra/local/stack.sh`;
  await run('bash', [script, 'up'], { timeout: 15 * 60_000, maxBuffer: 16 * 1024 * 1024 });
  const { stdout } = await run('bash', [script, 'env'], { timeout: 60_000 });
  const vars = new Map(stdout.split('\n').filter((l) => l.includes('=')).map((l) => [l.slice(0, l.indexOf('=')), l.slice(l.indexOf('=') + 1)]));
  const need = (name: string) => {
    const value = vars.get(name);
    if (!value) throw new Error(`infra/local/stack.sh env printed no ${name}:\n${stdout}`);
    return value;
  };
  return {
    infra: { kafkaBrokers: need('KAFKA_BROKERS'), pgUrl: need('PG_URL'), redisUrl: need('REDIS_URL'), source: 'stack-script' },
    // The stack stays up for the next run; `infra/local/stack.sh down` stops it.
    teardown: async () => undefined,
  };
}
