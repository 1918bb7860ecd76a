import { randomInt } from 'node:crypto';
import type { FastifyInstance } from 'fastify';
import { TopicOwners, TopicSchemas, topicName, topicOf, type DomainEvent, type EventOf, type EventType, type ServiceName } from '@labelflow/contracts';
import { dropDatabase } from './db';
import { GiveUp } from './eventually';
import type { HttpClient, HttpClientOptions, HttpResult } from './http';
import { ADMIN, authEnv, tokenFor, type TestIdentity } from './identity';
import type { TestInfra } from './infra';
import { produceRaw } from './kafka';
import { uniqueName } from './names';

/**
 * What `buildService` returns, as far as these helpers need it. Structural on purpose: service-kit's
 * own tests use this library, so it cannot import service-kit back (libraries form no cycles).
 */
export interface BuiltLike {
  readonly app: Pick<FastifyInstance, 'inject'>;
  readonly lifecycle: { close(): Promise<unknown> };
}

/** One service built in this process on real infrastructure, with its own database and topic prefix. */
export interface InProcessService<B extends BuiltLike> {
  readonly built: B;
  readonly prefix: string;
  readonly databaseUrl: string;
  /**
   * A client of the app through `inject` (no port), acting as `identity` (default: a platform admin;
   * `null`: no token). Like `httpClient`, it fails on a 5xx unless `options` ask for them.
   */
  http(identity?: TestIdentity | null, options?: HttpClientOptions): HttpClient;
  /**
   * Produces a hand-built event on its topic under this service's prefix, as its owning service
   * would publish it; checked against the topic's schema first, so a typo fails the test instead of
   * ending in a dead letter. Returns the event sent.
   */
  plant<T extends EventType>(type: T, fields: PlantedFields, payload: Readonly<Record<string, unknown>>): Promise<EventOf<T>>;
  /** Closes the service and drops its database. */
  close(): Promise<void>;
}

export interface PlantedFields {
  readonly taskId: string;
  readonly projectId: string;
  readonly attempt: number;
}

/** A fresh 64-bit id shaped like a Snowflake id (time in the high bits, random low 22 bits), as task and event ids are. */
export const freshSnowflake = (): string => ((BigInt(Date.now()) << 22n) | BigInt(randomInt(1 << 22))).toString();

/**
 * Builds a service in-process on a fresh database and topic prefix. `build` gets the environment to
 * load its config from (the test signing key trusted, a free port, limits far above what a test
 * sends; `env` on top) and returns `buildService`'s result: nothing consumes or listens until the
 * test calls `listen(built)`, so route tests answer through `inject` alone.
 */
export async function buildTestService<B extends BuiltLike>(
  infra: Pick<TestInfra, 'kafkaBrokers' | 'pgUrl' | 'redisUrl'>,
  name: ServiceName | 'saga-monitor',
  build: (env: Record<string, string>) => Promise<B>,
  env: Readonly<Record<string, string>> = {},
): Promise<InProcessService<B>> {
  const prefix = uniqueName('lf');
  const database = `${prefix}_${name.replace('-', '_')}`;
  const databaseUrl = `${infra.pgUrl}/${database}`;
  const built = await build({
    ...(await authEnv()),
    PORT: '0',
    HOST: '127.0.0.1',
    KAFKA_BROKERS: infra.kafkaBrokers,
    REDIS_URL: infra.redisUrl,
    DATABASE_URL: databaseUrl,
    KAFKA_TOPIC_PREFIX: prefix,
    KAFKA_TOPIC_PARTITIONS: '1',
    OUTBOX_POLL_MS: '200',
    KAFKA_SESSION_TIMEOUT_MS: '6000',
    RATE_LIMIT_PER_SECOND: '1000',
    RATE_LIMIT_BURST: '2000',
    // Requests answered 4xx are what route tests are about; only what went wrong inside is worth a line.
    LOG_LEVEL: 'error',
    // Production leaves it off for its CPU cost; every test runs with it (see BaseConfig).
    DB_REFUSE_NESTED_CONNECTIONS: 'true',
    ...env,
  }).catch(async (error: unknown) => {
    await dropDatabase(infra.pgUrl, database);
    throw error;
  });
  return {
    built,
    prefix,
    databaseUrl,
    http: (identity, options) => injectClient(built, identity === undefined ? ADMIN : identity, options),
    async plant(type, fields, payload) {
      const key = topicOf(type);
      const event = TopicSchemas[key].parse({ id: freshSnowflake(), type, version: 1, ...fields, occurredAt: new Date().toISOString(), producer: TopicOwners[key], payload }) as DomainEvent;
      await produceRaw(infra.kafkaBrokers, topicName(prefix, key), [{ key: event.taskId, value: JSON.stringify(event), headers: { 'event-type': event.type, 'event-version': String(event.version) } }]);
      return event as EventOf<typeof type>;
    },
    async close() {
      await built.lifecycle.close();
      await dropDatabase(infra.pgUrl, database);
    },
  };
}

/** The same client as `httpClient`, answered by `app.inject`: no port, no socket. */
export function injectClient(built: Pick<BuiltLike, 'app'>, identity: TestIdentity | null = ADMIN, options: HttpClientOptions = {}): HttpClient {
  const call = async <T>(method: 'GET' | 'POST', url: string, body?: unknown, headers: Record<string, string> = {}): Promise<HttpResult<T>> => {
    const auth: Record<string, string> = identity ? { authorization: `Bearer ${await tokenFor(identity)}` } : {};
    const payload = body === undefined ? undefined : typeof body === 'string' ? body : JSON.stringify(body);
    const response = await built.app.inject({ method, url, headers: { ...auth, ...(payload === undefined ? {} : { 'content-type': 'application/json' }), ...headers }, ...(payload === undefined ? {} : { payload }) });
    let parsed: unknown = response.body;
    try {
      parsed = response.body ? JSON.parse(response.body) : undefined;
    } catch {
      // Not JSON (e.g. /metrics): hand back the text.
    }
    const answered = new Headers();
    for (const [name, value] of Object.entries(response.headers)) {
      if (value !== undefined) for (const v of [value].flat()) answered.append(name, String(v));
    }
    if (response.statusCode >= 500 && options.serverErrors !== 'return') throw new GiveUp(`${method} ${url} answered ${response.statusCode}: ${response.body.slice(0, 500)}`);
    return { status: response.statusCode, body: parsed as T, headers: answered };
  };
  return {
    get: <T = unknown>(path: string, headers?: Record<string, string>) => call<T>('GET', path, undefined, headers),
    post: <T = unknown>(path: string, body?: unknown, headers?: Record<string, string>) => call<T>('POST', path, body, headers),
    as: (other: TestIdentity | null) => injectClient(built, other, options),
  };
}

/** A refusal as a test compares it: status, code, and the paths `VALIDATION_FAILED` names (if any). */
export interface Refusal {
  readonly status: number;
  readonly code: string | undefined;
  readonly paths?: readonly string[];
}

/**
 * Reduces an error answer to what its tests assert: both error formats (`{error: {code, details}}`
 * and the Idempotency-Key layer's problem documents, `{code}`), validation paths in order.
 */
export function refusal(result: HttpResult): Refusal {
  const body = (result.body ?? {}) as { error?: { code?: string; details?: unknown }; code?: string };
  const details = body.error?.details;
  const paths = Array.isArray(details) ? details.flatMap((d: { path?: unknown }) => (typeof d?.path === 'string' ? [d.path] : [])) : [];
  return { status: result.status, code: body.error?.code ?? body.code, ...(paths.length > 0 ? { paths } : {}) };
}
