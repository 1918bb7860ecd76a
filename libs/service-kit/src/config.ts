import { z } from 'zod';
import { bloomConfigProblems, DedupConfigShape, dedupConfigRefinement, dedupConfigRefinementMessage } from '@labelflow/dedup';
import { AuthConfigShape, authConfigProblems } from './auth';
import { KafkaSecurityShape, kafkaSecurityProblems } from './kafka-security';
import { ServiceKitError, ServiceKitErrors } from './errors';

/** One refinement, not regex + refine: zod runs every check, and one bad broker is one problem. */
const isBroker = (b: string) => {
  const match = /^[^:\s]+:(\d{1,5})$/.exec(b);
  return match !== null && Number(match[1]) >= 1 && Number(match[1]) <= 65535;
};

const csv = z
  .string()
  .min(1)
  .transform((s) => s.split(',').map((x) => x.trim()).filter(Boolean))
  .pipe(z.array(z.string().refine(isBroker, 'must be host:port, port 1-65535')).min(1));

const url = (protocols: readonly string[]) =>
  z.string().refine((s) => {
    try {
      return protocols.includes(new URL(s).protocol);
    } catch {
      return false;
    }
  }, `must be a ${protocols.join(' or ')}// URL`);

/** The longest fetch wait: a consumer gets CLOSE_STEP_TIMEOUT_MS (5 s) to close, and waits out its fetch first. */
const FETCH_WAIT_MAX_MS = 4_000;
const FETCH_WAIT_LIMIT = `must be at most ${FETCH_WAIT_MAX_MS} ms: a consumer lets its fetch end before it leaves the group, within the 5 s it gets to close`;

/** Settings every service shares; services extend it with their own. */
export const BaseConfig = z.object({
  PORT: z.coerce.number().int().min(0).max(65535),
  HOST: z.string().default('0.0.0.0'),
  /** When set, GET /metrics is also served here (on METRICS_HOST) without a token, for a scraper in the private network. */
  METRICS_PORT: z.coerce.number().int().min(0).max(65535).optional(),
  /**
   * Where METRICS_PORT listens. Loopback unless told otherwise: a port that answers without a
   * token must be opened to the network on purpose (compose does, for Prometheus on its network).
   */
  METRICS_HOST: z.string().min(1).default('127.0.0.1'),
  KAFKA_BROKERS: csv,
  KAFKA_TOPIC_PREFIX: z.string().regex(/^[A-Za-z0-9._-]{1,100}$/).default('labelflow'),
  KAFKA_TOPIC_PARTITIONS: z.coerce.number().int().min(1).max(1000).default(6),
  /** Copies of each partition for topics this service creates: 1 for one broker, 3 for a production cluster. */
  KAFKA_TOPIC_REPLICATION_FACTOR: z.coerce.number().int().min(1).max(32).default(1),
  ...KafkaSecurityShape,
  DATABASE_URL: url(['postgres:', 'postgresql:']),
  REDIS_URL: url(['redis:', 'rediss:']),
  /** How long a silent consumer keeps its partitions; a crashed instance's are reassigned after it. */
  KAFKA_SESSION_TIMEOUT_MS: z.coerce.number().int().min(6_000).max(300_000).default(30_000),
  /**
   * A fetch returns once this many bytes are ready or `KAFKA_FETCH_MAX_WAIT_MS` has passed. Under
   * load, waiting a few milliseconds turns a fetch (and a transaction) per event into one per
   * batch; idle, it bounds how often an empty fetch is asked for.
   */
  KAFKA_FETCH_MIN_BYTES: z.coerce.number().int().min(1).max(10_485_760).default(65_536),
  // Both waits stay under the 5 s a resource gets to close (CLOSE_STEP_TIMEOUT_MS): kafkajs lets
  // the fetch in flight end before it leaves the group, and a consumer that runs out of time there
  // never sends LeaveGroup, so its partitions sit idle until its session times out.
  KAFKA_FETCH_MAX_WAIT_MS: z.coerce.number().int().min(1).max(FETCH_WAIT_MAX_MS, FETCH_WAIT_LIMIT).default(50),
  /**
   * The idle long poll of @labelflow/messaging: after this many fetches in a row brought nothing,
   * the next asks for any message and waits up to the idle wait, so a quiet consumer fetches a few
   * times a second instead of twenty and answers its next event at once. A wait of 0 turns it off.
   */
  KAFKA_FETCH_IDLE_WAIT_MS: z.coerce.number().int().min(0).max(FETCH_WAIT_MAX_MS, FETCH_WAIT_LIMIT).default(250),
  KAFKA_FETCH_IDLE_AFTER_EMPTY: z.coerce.number().int().min(1).max(1_000).default(40),
  LOG_LEVEL: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']).default('info'),
  OUTBOX_POLL_MS: z.coerce.number().int().min(10).max(60_000).default(500),
  OUTBOX_BATCH_SIZE: z.coerce.number().int().min(1).max(10_000).default(500),
  ...DedupConfigShape,
  /** Consumer retry policy: backoff between attempts, and failures before a message is dead-lettered. */
  CONSUMER_RETRY_INITIAL_MS: z.coerce.number().int().min(1).max(60_000).default(100),
  CONSUMER_RETRY_MAX_MS: z.coerce.number().int().min(1).max(600_000).default(5_000),
  CONSUMER_MAX_ATTEMPTS: z.coerce.number().int().min(1).max(100).default(5),
  /** How long an Idempotency-Key's stored response is replayed (the published expiry, default 24 h). */
  IDEMPOTENCY_TTL_MS: z.coerce.number().int().min(1_000).max(30 * 24 * 3600_000).default(24 * 3600_000),
  /**
   * How long a JSON body may take to arrive once the service starts reading it (after authentication): a client that sends one byte a
   * minute would otherwise hold its connection (and the rate limiter's one count) for good. The
   * bulk import streams its NDJSON without it: its silence is bounded by IMPORT_IDLE_MS.
   */
  HTTP_BODY_TIMEOUT_MS: z.coerce.number().int().min(100).max(600_000).default(30_000),
  /** Requests one caller may have waiting (Prefer: wait) in one instance; beyond it the wait is not honoured. */
  LONG_POLLS_PER_CALLER: z.coerce.number().int().min(1).max(100_000).default(256),
  /** How often a waiting request looks again without a signal: the fallback for a notification that went missing. */
  LONG_POLL_RECHECK_MS: z.coerce.number().int().min(100).max(60_000).default(5_000),
  /**
   * While the server's autovacuum is off, how often the service looks for its own tables that
   * autovacuum's default rules would vacuum or analyze, and does so; 0: never.
   */
  DB_UPKEEP_INTERVAL_MS: z.coerce.number().int().min(0).max(3_600_000).default(10_000),
  /**
   * The old generation may grow to (1 + this/100) times what survived V8's last full collection
   * before the next one (heap.ts); 0 leaves V8's own factor, up to 4x. Process-wide: applied by
   * `startService`. task-svc defaults to 100 for its bulk import's memory; a consumer that catches
   * up on a backlog pays for it in CPU, so the others default to 0.
   */
  HEAP_GROWING_PERCENT: z.coerce.number().int().min(0).max(300).default(0),
  /**
   * A pool connection asked for inside a transaction body fails at once (NESTED_CONNECTION) instead
   * of starving the pool under load. The check keeps an AsyncLocalStorage, which on Node 20 costs
   * every promise of the process (about 7 % of an HTTP command's CPU), so it is off by
   * default and on in every test (libs/testing), where the mistake is found.
   */
  DB_REFUSE_NESTED_CONNECTIONS: z.enum(['true', 'false']).default('false').transform((v) => v === 'true'),
  /**
   * A database statement with no answer for this long has its session looked up over a fresh
   * connection; the connection is closed when the server says the answer is not coming or cannot
   * be reached (createPool's `stallMs`). 0: off, for a transaction-mode pooler in between.
   */
  DB_STALL_MS: z.coerce
    .number()
    .int()
    .refine((ms) => ms === 0 || (ms >= 1_000 && ms <= 3_600_000), 'must be 0 (off) or 1000-3600000: a shorter bound would have every long statement looked into all the time')
    .default(10_000),
  /** How often durable deadlines (assignment leases, review SLAs) are checked. */
  SWEEP_INTERVAL_MS: z.coerce.number().int().min(10).max(3_600_000).default(1_000),
  /** Fault injection for crash tests; never set in production. */
  FAULT_KILL_BEFORE_PUBLISH: z.enum(['0', '1']).default('0').transform((v) => v === '1'),
  /** Fault injection for crash tests: SIGKILL after a POST committed, before its reply is sent. */
  FAULT_KILL_BEFORE_REPLY: z.enum(['0', '1']).default('0').transform((v) => v === '1'),
  ...AuthConfigShape,
});
export type BaseConfig = z.infer<typeof BaseConfig>;

/** Cross-field rules every service's config must also pass (zod refinements do not survive .extend). */
export const checkBaseConfig = <C extends BaseConfig>(config: C): string[] => [
  ...(dedupConfigRefinement(config) ? [] : [`${dedupConfigRefinementMessage.path.join('.')}: ${dedupConfigRefinementMessage.message}`]),
  ...bloomConfigProblems(config),
  ...(config.CONSUMER_RETRY_MAX_MS >= config.CONSUMER_RETRY_INITIAL_MS ? [] : ['CONSUMER_RETRY_MAX_MS: must be at least CONSUMER_RETRY_INITIAL_MS']),
  ...(config.METRICS_PORT !== undefined && config.METRICS_PORT !== 0 && config.METRICS_PORT === config.PORT ? ['METRICS_PORT: must differ from PORT (the token-free scrape port is a second listener)'] : []),
  ...authConfigProblems(config),
  ...kafkaSecurityProblems(config),
];

/**
 * Parses the environment once at startup. A bad value stops the service with every problem listed
 * (variable name and reason), never a stack trace from deep inside a client.
 */
export function loadConfig<S extends z.ZodType<BaseConfig>>(schema: S, env: Record<string, string | undefined>): z.infer<S> {
  // An empty or blank variable (`PORT=`, `PORT=" "`) means "not set": it takes the default (or is
  // reported missing) instead of coercing to 0.
  const present = Object.fromEntries(Object.entries(env).filter(([, v]) => v !== undefined && v.trim() !== ''));
  const parsed = schema.safeParse(present);
  const invalid = (problems: readonly string[]) =>
    new ServiceKitError(ServiceKitErrors.CONFIG_INVALID, `invalid configuration:\n  ${problems.join('\n  ')}`, { details: problems });
  if (!parsed.success) throw invalid(parsed.error.issues.map((i) => `${i.path.join('.') || '(root)'}: ${i.message}`));
  const problems = checkBaseConfig(parsed.data);
  if (problems.length > 0) throw invalid(problems);
  return parsed.data;
}
