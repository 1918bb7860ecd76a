import type { ServiceName } from '@labelflow/contracts';
import { createTestDatabase, dropDatabase, queryRows } from './db';
import { eventually } from './eventually';
import { httpClient, type HttpClient } from './http';
import { ADMIN, authEnv, type TestIdentity } from './identity';
import { consumerLag, topicEnds } from './kafka';
import type { TestInfra } from './infra';
import { uniqueName } from './names';
import { serviceNames, startServiceProcess, type ServiceProcess } from './processes';

/** What `startStack` starts besides the four services. */
export interface StackOptions {
  /** Also start the saga monitor (apps/saga-monitor), last, with these settings on top of the stack's. */
  readonly monitor?: Record<string, string>;
}

export interface TestStack {
  readonly prefix: string;
  readonly databases: Readonly<Record<ServiceName, string>>;
  readonly processes: Record<ServiceName, ServiceProcess>;
  /** A client of one service acting as `identity` (default: a platform admin; `null`: no token). */
  http(name: ServiceName, identity?: TestIdentity | null): HttpClient;
  /** Starts (again) one service with the stack's settings plus `env` overrides. */
  start(name: ServiceName, env?: Record<string, string>): Promise<ServiceProcess>;
  /** Starts one more instance of a service in the same consumer group (stopped with the stack). */
  startExtra(name: ServiceName, env?: Record<string, string>): Promise<ServiceProcess>;
  /** The consumer group and the topics each service consumes, for lag and replay checks. */
  groupOf(name: ServiceName): string;
  /** Metrics text of a service's current process. */
  metrics(name: ServiceName): Promise<string>;
  /** The saga monitor, when the stack was started with `monitor` (undefined otherwise). */
  readonly monitor: ServiceProcess<'saga-monitor'> | undefined;
  /** A client of the saga monitor acting as `identity` (default: a platform admin); throws when it was not started. */
  monitorHttp(identity?: TestIdentity | null): HttpClient;
  /**
   * Resolves once the stack is at rest: every outbox is drained and every service's consumer group
   * has committed all that is on its topics (in that order, and again until both hold together,
   * since consuming can publish more); the saga monitor's group too, when it runs.
   */
  quiesce(timeoutMs?: number): Promise<void>;
  stop(): Promise<void>;
}

/**
 * The four services as real processes on real infrastructure, isolated from every other test by a
 * fresh topic prefix (so fresh topics and consumer groups) and fresh databases.
 */
export async function startStack(
  infra: Pick<TestInfra, 'kafkaBrokers' | 'pgUrl' | 'redisUrl'>,
  overrides: Partial<Record<ServiceName, Record<string, string>>> = {},
  options: StackOptions = {},
): Promise<TestStack> {
  const prefix = uniqueName('lf');
  const databases = {} as Record<ServiceName, string>;
  const databaseName = (name: ServiceName) => `${prefix}_${name.replace('-', '_')}`;
  /** Every database this stack may have created: on a failed start, none is left behind. */
  const dropAll = () => Promise.all(serviceNames.map((name) => dropDatabase(infra.pgUrl, databaseName(name))));
  const created = await Promise.allSettled(serviceNames.map(async (name) => void (databases[name] = (await createTestDatabase(infra.pgUrl, databaseName(name))).url)));
  const refused = created.find((r): r is PromiseRejectedResult => r.status === 'rejected');
  if (refused) {
    await dropAll();
    throw refused.reason;
  }
  const processes = {} as Record<ServiceName, ServiceProcess>;
  const extras: ServiceProcess[] = [];
  const auth = await authEnv();
  const monitorDatabase = `${prefix}_saga_monitor`;
  const baseEnv = (name: ServiceName | 'saga-monitor'): Record<string, string> => ({
    ...auth,
    KAFKA_BROKERS: infra.kafkaBrokers,
    REDIS_URL: infra.redisUrl,
    DATABASE_URL: name === 'saga-monitor' ? `${infra.pgUrl}/${monitorDatabase}` : databases[name],
    KAFKA_TOPIC_PREFIX: prefix,
    KAFKA_TOPIC_PARTITIONS: '3',
    OUTBOX_POLL_MS: '200',
    // Crash tests restart services: the dead instance's partitions move after this long.
    KAFKA_SESSION_TIMEOUT_MS: '6000',
    // Tests drive whole sagas as a handful of subjects (the admin above all): far above the
    // production default, so no test is ever rate-limited by accident. A test of the limits
    // overrides these for the instance it starts.
    RATE_LIMIT_PER_SECOND: '1000',
    RATE_LIMIT_BURST: '2000',
  });
  const start = async (name: ServiceName, env: Record<string, string> = {}) => {
    processes[name] = await startServiceProcess(name, { ...baseEnv(name), ...env });
    return processes[name];
  };
  let monitor: ServiceProcess<'saga-monitor'> | undefined;
  try {
    // Together: each creates whatever topics are missing, and a topic another start created a
    // moment before is found (ensureTopics), so a stack is up in the time of its slowest service.
    const started = await Promise.allSettled(serviceNames.map((name) => start(name, overrides[name])));
    const failed = started.find((r): r is PromiseRejectedResult => r.status === 'rejected');
    if (failed) throw failed.reason;
    // Last: it only reads what the services publish. It creates its own database.
    if (options.monitor) monitor = await startServiceProcess('saga-monitor', { ...baseEnv('saga-monitor'), ...options.monitor });
  } catch (error) {
    await Promise.all(Object.values(processes).map((p) => p.kill()));
    await dropAll();
    if (options.monitor) await dropDatabase(infra.pgUrl, monitorDatabase);
    throw error;
  }
  const groupOf = (name: ServiceName) => `${prefix}.${name}`;
  return {
    prefix,
    databases,
    processes,
    http: (name, identity) => httpClient(processes[name].url, identity === undefined ? ADMIN : identity),
    start,
    startExtra: async (name, env = {}) => {
      const extra = await startServiceProcess(name, { ...baseEnv(name), ...env });
      extras.push(extra);
      return extra;
    },
    groupOf,
    metrics: async (name) => (await httpClient(processes[name].url).get<string>('/metrics')).body,
    monitor,
    monitorHttp: (identity) => {
      if (!monitor) throw new Error('the stack runs no saga monitor: start it with startStack(infra, overrides, { monitor: {} })');
      return httpClient(monitor.url, identity === undefined ? ADMIN : identity);
    },
    quiesce: async (timeoutMs = 60_000) => {
      const topicsOf = (name: ServiceName) => processes[name].consumes.map((key) => `${prefix}.${key}-events`);
      const everyTopic = [...new Set(serviceNames.flatMap(topicsOf))];
      await eventually(async () => {
        for (const name of serviceNames) {
          const [row] = await queryRows<{ n: string }>(databases[name], 'SELECT count(*) AS n FROM outbox_pending');
          if (Number(row?.n) !== 0) throw new Error(`${name} has ${row?.n} outbox rows left to publish`);
        }
        // The lags are read one group after another: an event published meanwhile, after its
        // consumer's lag was read, shows only as a topic end that moved.
        const before = await topicEnds(infra.kafkaBrokers, everyTopic);
        for (const name of serviceNames) {
          const lag = await consumerLag(infra.kafkaBrokers, groupOf(name), topicsOf(name));
          if (lag !== 0) throw new Error(`${name} has ${lag} messages left to consume`);
        }
        // The monitor reads every service's events (its group named as a service's would be).
        if (monitor) {
          const lag = await consumerLag(infra.kafkaBrokers, `${prefix}.saga-monitor`, everyTopic);
          if (lag !== 0) throw new Error(`the saga monitor has ${lag} messages left to consume`);
        }
        for (const name of serviceNames) {
          const [row] = await queryRows<{ n: string }>(databases[name], 'SELECT count(*) AS n FROM outbox_pending');
          if (Number(row?.n) !== 0) throw new Error(`${name} published more while the others caught up`);
        }
        if ((await topicEnds(infra.kafkaBrokers, everyTopic)) !== before) throw new Error('events were published while the consumers caught up');
      }, { timeoutMs, intervalMs: 250 });
    },
    async stop() {
      await Promise.all([...Object.values(processes), ...extras, ...(monitor ? [monitor] : [])].map((p) => p.stop()));
      await dropAll();
      if (monitor) await dropDatabase(infra.pgUrl, monitorDatabase);
    },
  };
}
