import { randomUUID } from 'node:crypto';
import type { FastifyInstance, FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify';
import type { Redis } from 'ioredis';
import type pg from 'pg';
import { BreakerState, CircuitBreaker } from '@labelflow/dedup';
import type { Logger, Metrics } from '@labelflow/telemetry';
import { IdempotencyError, IdempotencyErrors, type IdempotencyErrorCode } from './errors';
import { checkIdempotencyKey, idempotencyScope, requestFingerprint } from './key';
import { createIdempotencyRedisTier, type IdempotencyRedisTier, type RedisSeen } from './redis-tier';
import { claimIdempotencyKey, completeIdempotencyKey, readIdempotencyKey, type IdempotencyRecord, type StoredResponse } from './store';

export const IDEMPOTENCY_KEY_HEADER = 'idempotency-key';
export const IDEMPOTENT_REPLAYED_HEADER = 'idempotent-replayed';
export const PROBLEM_CONTENT_TYPE = 'application/problem+json; charset=utf-8';
/** Base of the problem `type` URIs: `urn:labelflow:problem:idempotency-key-in-flight`, … */
export const PROBLEM_TYPE_BASE = 'urn:labelflow:problem:';

export interface IdempotencyPluginOptions {
  readonly pool: pg.Pool;
  /** The fast path; without it (or while it fails) PostgreSQL alone gives the same guarantees. */
  readonly redis?: Redis;
  /** Redis key prefix, one per service: `lf:idem:<topicPrefix>:<service>`. */
  readonly namespace: string;
  /** How long a completed response is kept and replayed. Default 24 h. */
  readonly ttlMs?: number;
  /** How long a running request holds its key in Redis; also PostgreSQL's wait bound for a duplicate. Default 30 s. */
  readonly lockMs?: number;
  /** Latency budget of one Redis call before falling back to PostgreSQL. Default 200 ms. */
  readonly redisTimeoutMs?: number;
  /** Consecutive Redis failures that make requests skip Redis for `openMs`. Default 3 / 1 s. */
  readonly breaker?: { readonly failureThreshold: number; readonly openMs: number };
  readonly logger: Logger;
  readonly metrics?: Metrics;
  /** Clock (epoch ms) for created_at / expires_at; tests inject it. */
  readonly now?: () => number;
  /**
   * Who the caller is (the first part of the scope), from the authenticated request, never from
   * something the client merely asserts: a key is only ever replayed to whoever first used it.
   */
  readonly callerOf: (request: FastifyRequest) => string;
  /** Wraps the command as a transaction body (the host's guard against a second connection). */
  readonly transactionBody?: <T>(fn: () => Promise<T>) => Promise<T>;
}

export interface IdempotentOptions {
  /** Answer 400 IDEMPOTENCY_KEY_REQUIRED when the header is absent. Default false. */
  readonly required?: boolean;
  /** The project the command acts on (second part of the scope); `-` when absent. */
  readonly project?: string | null;
}

/** What a command returns: the plugin sends it, and stores it when status < 500. */
export interface IdempotentResult {
  readonly status: number;
  readonly body?: unknown;
  readonly headers?: Readonly<Record<string, string>>;
}

/**
 * The command: its effects and outbox rows go through `tx`; `key` (undefined without a header)
 * is meant as the emitted events' causationId.
 */
export type IdempotentCommand = (tx: pg.PoolClient, key: string | undefined) => Promise<IdempotentResult>;

declare module 'fastify' {
  interface FastifyRequest {
    /**
     * Runs `command` at most once per Idempotency-Key (see @labelflow/idempotency) and sends its
     * response, or the stored one. Return what it returns from the handler.
     */
    idempotent(options: IdempotentOptions, command: IdempotentCommand): Promise<FastifyReply>;
  }
}

export const IdempotencyOutcome = {
  executed: 'executed',
  replayed: 'replayed',
  inFlight: 'in_flight',
  mismatch: 'mismatch',
  missing: 'missing',
  invalid: 'invalid',
  /** No header on a route where it is optional: the command ran without a record. */
  unkeyed: 'unkeyed',
  /** The command threw or returned ≥ 500: rolled back, nothing stored, the key is free again. */
  failed: 'failed',
} as const;
export type IdempotencyOutcome = (typeof IdempotencyOutcome)[keyof typeof IdempotencyOutcome];

/** The body of every idempotency error (RFC 9457 problem details plus our stable `code`). */
export interface IdempotencyProblem {
  readonly type: string;
  readonly title: string;
  readonly status: number;
  readonly detail: string;
  readonly code: IdempotencyErrorCode;
}

const PROBLEMS = {
  [IdempotencyErrors.KEY_REQUIRED]: { status: 400, slug: 'idempotency-key-required', title: 'Idempotency-Key is missing' },
  [IdempotencyErrors.KEY_INVALID]: { status: 400, slug: 'idempotency-key-invalid', title: 'Idempotency-Key is invalid' },
  [IdempotencyErrors.KEY_IN_FLIGHT]: { status: 409, slug: 'idempotency-key-in-flight', title: 'A request with this Idempotency-Key is being processed' },
  [IdempotencyErrors.KEY_REUSED]: { status: 422, slug: 'idempotency-key-reused', title: 'Idempotency-Key is already used for a different request' },
} as const;
type ProblemCode = keyof typeof PROBLEMS;

export function idempotencyProblem(code: ProblemCode, detail: string): IdempotencyProblem {
  const p = PROBLEMS[code];
  return { type: `${PROBLEM_TYPE_BASE}${p.slug}`, title: p.title, status: p.status, detail, code };
}

const DAY_MS = 24 * 3600_000;

function validate(options: IdempotencyPluginOptions): void {
  const bad = (message: string) => new IdempotencyError(IdempotencyErrors.CONFIG_INVALID, message);
  if (!options.pool) throw bad('idempotency: pool is required');
  if (typeof options.callerOf !== 'function') throw bad('idempotency: callerOf is required (the authenticated caller scopes every key)');
  if (!options.namespace || /\s/.test(options.namespace)) throw bad('idempotency: namespace must be a non-empty string without spaces');
  for (const [name, value] of [['ttlMs', options.ttlMs], ['lockMs', options.lockMs], ['redisTimeoutMs', options.redisTimeoutMs]] as const) {
    if (value !== undefined && !(Number.isInteger(value) && value > 0)) throw bad(`idempotency: ${name} must be a positive integer (ms), got ${value}`);
  }
}

const sendResult = (reply: FastifyReply, result: StoredResponse, replayed: boolean): FastifyReply => {
  reply.code(result.status);
  for (const [name, value] of Object.entries(result.headers ?? {})) reply.header(name, value);
  if (replayed) reply.header(IDEMPOTENT_REPLAYED_HEADER, 'true');
  return result.body === undefined ? reply.send() : reply.send(result.body);
};

const sendProblem = (reply: FastifyReply, code: ProblemCode, detail: string): FastifyReply => {
  const problem = idempotencyProblem(code, detail);
  if (code === IdempotencyErrors.KEY_IN_FLIGHT) reply.header('retry-after', '1');
  return reply.code(problem.status).header('content-type', PROBLEM_CONTENT_TYPE).send(JSON.stringify(problem));
};

const asStored = (result: IdempotentResult): StoredResponse => {
  if (!Number.isInteger(result?.status) || result.status < 100 || result.status > 599) {
    throw new IdempotencyError(IdempotencyErrors.CONFIG_INVALID, `an idempotent command must return { status, body? }, got status ${String(result?.status)}`);
  }
  return { status: result.status, ...(result.body !== undefined ? { body: result.body } : {}), ...(result.headers ? { headers: { ...result.headers } } : {}) };
};

const isLockTimeout = (error: unknown) => (error as { code?: string }).code === '55P03';

/**
 * How long a request that found another owner's lock in Redis, and no committed response, waits
 * on PostgreSQL's claim before answering 409: long enough for a live owner's row lock to show,
 * short enough that the client hears "in flight" at once.
 */
const LIVE_OWNER_PROBE_MS = 200;

/** Marks a pooled client that already has its error listener, whichever plugin instance added it. */
const GUARDED = Symbol.for('labelflow.idempotency.error-listener');

/** The claim waited out its lock timeout: another request holds the key. */
class ClaimTimedOut extends Error {
  constructor(cause: unknown) {
    super('the idempotency key stayed locked by another request', { cause });
  }
}

async function plugin(app: FastifyInstance, options: IdempotencyPluginOptions): Promise<void> {
  validate(options);
  const { pool, namespace, logger } = options;
  const ttlMs = options.ttlMs ?? DAY_MS;
  const lockMs = options.lockMs ?? 30_000;
  const now = options.now ?? Date.now;
  const callerFor = options.callerOf;
  const log = logger.child({ component: 'idempotency' });

  const requests = options.metrics?.counter('idempotency_requests_total', 'Requests through the Idempotency-Key layer, by outcome', ['outcome']);
  const fallbacks = options.metrics?.counter('idempotency_redis_fallbacks_total', 'Redis calls that failed or were skipped; PostgreSQL answered alone', ['op']);
  const count = (outcome: IdempotencyOutcome) => requests?.inc({ outcome });

  const tier: IdempotencyRedisTier | undefined = options.redis
    ? createIdempotencyRedisTier({ redis: options.redis, lockMs, timeoutMs: options.redisTimeoutMs ?? 200, onScriptLoad: () => log.debug('idempotency script loaded') })
    : undefined;
  const breaker = new CircuitBreaker({
    failureThreshold: options.breaker?.failureThreshold ?? 3,
    openMs: options.breaker?.openMs ?? 1_000,
    // Called as methods: pino's level functions read their logger from `this`.
    onTransition: (from, to) => (to === BreakerState.open ? log.warn({ from, to }, 'idempotency redis breaker') : log.info({ from, to }, 'idempotency redis breaker')),
  });

  /** One Redis call, or undefined when Redis is absent, failing, or over its budget. */
  async function viaRedis<T>(op: string, call: (t: IdempotencyRedisTier) => Promise<T>): Promise<T | undefined> {
    if (!tier) return undefined;
    if (!breaker.allow()) {
      fallbacks?.inc({ op });
      return undefined;
    }
    try {
      const value = await call(tier);
      breaker.success();
      return value;
    } catch (error) {
      breaker.failure();
      fallbacks?.inc({ op });
      log.debug({ err: error, op }, 'idempotency redis call failed; PostgreSQL answers alone');
      return undefined;
    }
  }

  // pg-pool drops its idle error listener on checkout and pg emits 'error' when a checked-out
  // client's connection ends (a restart, pg_terminate_backend): unheard, that kills the process.
  // The query in flight rejects with the cause, which is what the command's caller acts on.
  const guard = (client: pg.PoolClient) => {
    const marked = client as pg.PoolClient & { [GUARDED]?: true };
    if (marked[GUARDED]) return;
    marked[GUARDED] = true;
    client.on('error', () => undefined);
  };

  // fastify gives a handler the request and the reply, but `request.idempotent` needs the reply.
  const replies = new WeakMap<FastifyRequest, FastifyReply>();
  app.addHook('onRequest', (request, reply, done) => {
    replies.set(request, reply);
    done();
  });

  type Executed =
    | { readonly kind: 'existing'; readonly existing: IdempotencyRecord }
    | { readonly kind: 'ran'; readonly client: pg.PoolClient; readonly result: StoredResponse };

  /**
   * Opens the command's transaction, runs `claim` (if any) and then the command. On `ran` the
   * transaction is still open and the caller must finish it and release the client.
   */
  async function execute(command: IdempotentCommand, key: string | undefined, claimWaitMs?: number, claim?: (tx: pg.PoolClient) => Promise<IdempotencyRecord | undefined>): Promise<Executed> {
    const client = await pool.connect();
    guard(client);
    try {
      // One round trip: the lock timeout bounds the wait for another request holding the same key
      // (and, as a safety net, any lock the command waits for: it then fails as transient, 503).
      await client.query(claim ? `BEGIN; SET LOCAL lock_timeout = ${Math.max(1, Math.floor(claimWaitMs ?? lockMs))}` : 'BEGIN');
      const existing = claim ? await claim(client) : undefined;
      if (existing) {
        await client.query('ROLLBACK');
        client.release();
        return { kind: 'existing', existing };
      }
      const body = options.transactionBody ?? ((fn) => fn());
      return { kind: 'ran', client, result: asStored(await body(() => command(client, key))) };
    } catch (error) {
      await client.query('ROLLBACK').catch(() => undefined);
      client.release();
      throw error;
    }
  }

  const mismatch = (reply: FastifyReply, key: string): FastifyReply => {
    count(IdempotencyOutcome.mismatch);
    return sendProblem(reply, IdempotencyErrors.KEY_REUSED, `Idempotency-Key ${key} was already used for a different request; use a new key for a new operation`);
  };

  async function replay(reply: FastifyReply, record: { fingerprint: string; response: StoredResponse }, fingerprint: string, key: string): Promise<FastifyReply> {
    if (record.fingerprint !== fingerprint) return mismatch(reply, key);
    count(IdempotencyOutcome.replayed);
    return sendResult(reply, record.response, true);
  }

  async function idempotent(request: FastifyRequest, opts: IdempotentOptions, command: IdempotentCommand): Promise<FastifyReply> {
    const reply = replies.get(request);
    if (!reply) throw new IdempotencyError(IdempotencyErrors.CONFIG_INVALID, 'register the idempotency plugin before the routes that use request.idempotent');
    const header = request.headers[IDEMPOTENCY_KEY_HEADER];

    if (header === undefined) {
      if (opts.required) {
        count(IdempotencyOutcome.missing);
        return sendProblem(reply, IdempotencyErrors.KEY_REQUIRED, 'this endpoint requires an Idempotency-Key header; send a unique key per operation and reuse it on every retry');
      }
      const run = await executeTracked(command, undefined);
      if (!run) return reply;
      const { client, result } = run;
      try {
        await finishTransaction(client, result);
      } finally {
        client.release();
      }
      count(result.status >= 500 ? IdempotencyOutcome.failed : IdempotencyOutcome.unkeyed);
      return sendResult(reply, result, false);
    }

    const check = checkIdempotencyKey(header);
    if (!check.ok) {
      count(IdempotencyOutcome.invalid);
      return sendProblem(reply, IdempotencyErrors.KEY_INVALID, check.reason);
    }
    const key = check.key;
    const scope = idempotencyScope(callerFor(request), opts.project);
    const fingerprint = requestFingerprint({ method: request.method, route: request.routeOptions.url ?? request.url, params: request.params, query: request.query, body: request.body });
    const owner = randomUUID();
    const redisKey = `${namespace}:${scope}:${key}`;
    const cache = (record: IdempotencyRecord) => viaRedis('finish', (t) => t.finish(redisKey, record.fingerprint, record.response, record.expiresAt.getTime() - now()));

    // 1. Redis: a cached response or a live lock answers without touching PostgreSQL.
    const seen: RedisSeen | undefined = await viaRedis('begin', (t) => t.begin(redisKey, fingerprint, owner));
    if (seen?.kind === 'done') return replay(reply, seen, fingerprint, key);
    if (seen?.kind === 'locked') {
      if (seen.fingerprint !== fingerprint) return mismatch(reply, key);
      // PostgreSQL is the authority: a lock left behind (finish failed) must not hide a committed response.
      const committed = await readIdempotencyKey(pool, scope, key, new Date(now()));
      if (committed) {
        await cache(committed);
        return replay(reply, committed, fingerprint, key);
      }
      // Nothing committed: the lock's owner is still running, or its process died mid-command
      // (a SIGKILL leaves the lock for lockMs). PostgreSQL tells them apart below: a live owner
      // holds the claimed row, and the claim then times out at once into the same 409; a dead
      // owner's transaction is gone with its connection, and this retry claims the key and runs.
    }
    const ownLock = seen?.kind === 'acquired';
    const claimWaitMs = seen?.kind === 'locked' ? Math.min(lockMs, LIVE_OWNER_PROBE_MS) : lockMs;
    // Released even when `begin` failed or timed out: Redis may still have run it and set our lock,
    // which would answer the client's retry 409 for lockMs. The release is owner-checked.
    const releaseLock = () => viaRedis('release', (t) => t.release(redisKey, fingerprint, owner));

    // 2. PostgreSQL: claim the key, run the command, store its response, commit — one transaction.
    const createdAt = now();
    const expiresAt = new Date(createdAt + ttlMs);
    let run: Executed;
    try {
      run = await execute(command, key, claimWaitMs, async (tx) => {
        try {
          const claim = await claimIdempotencyKey(tx, { scope, key, fingerprint, now: new Date(createdAt), expiresAt });
          return claim.claimed ? undefined : claim.record;
        } catch (error) {
          throw isLockTimeout(error) ? new ClaimTimedOut(error) : error;
        }
      });
    } catch (error) {
      await releaseLock();
      if (error instanceof ClaimTimedOut) {
        count(IdempotencyOutcome.inFlight);
        return sendProblem(reply, IdempotencyErrors.KEY_IN_FLIGHT, `a request with Idempotency-Key ${key} is still being processed; retry later with the same key`);
      }
      count(IdempotencyOutcome.failed);
      throw error;
    }
    if (run.kind === 'existing') {
      // Redis forgot (restart, flush, failover) or was skipped: the stored response still wins.
      if (ownLock) await cache(run.existing);
      return replay(reply, run.existing, fingerprint, key);
    }

    const { client, result } = run;
    try {
      if (result.status < 500) await completeIdempotencyKey(client, scope, key, result);
      await finishTransaction(client, result);
    } catch (error) {
      await client.query('ROLLBACK').catch(() => undefined);
      await releaseLock();
      count(IdempotencyOutcome.failed);
      throw error;
    } finally {
      client.release();
    }
    if (result.status >= 500) {
      await releaseLock();
      count(IdempotencyOutcome.failed);
      return sendResult(reply, result, false);
    }
    // 3. After COMMIT: the response replaces the lock in Redis (best effort; PostgreSQL has it).
    await cache({ fingerprint, response: result, expiresAt });
    count(IdempotencyOutcome.executed);
    return sendResult(reply, result, false);
  }

  /** `execute` without a claim step; counts a throw as failed. */
  async function executeTracked(command: IdempotentCommand, key: string | undefined) {
    try {
      const run = await execute(command, key);
      return run.kind === 'ran' ? run : undefined;
    } catch (error) {
      count(IdempotencyOutcome.failed);
      throw error;
    }
  }

  /** COMMIT, or ROLLBACK for a returned status ≥ 500 (nothing of a failed command persists). */
  async function finishTransaction(client: pg.PoolClient, result: StoredResponse): Promise<void> {
    await client.query(result.status >= 500 ? 'ROLLBACK' : 'COMMIT');
  }

  app.decorateRequest('idempotent', function (this: FastifyRequest, opts: IdempotentOptions, command: IdempotentCommand) {
    return idempotent(this, opts, command);
  });
}

/**
 * The Idempotency-Key plugin. Register it once per service, before the routes, on the root app:
 * it is not encapsulated (like fastify-plugin), so `request.idempotent` exists in every route.
 */
export const idempotencyPlugin: FastifyPluginAsync<IdempotencyPluginOptions> = Object.assign(plugin, {
  [Symbol.for('skip-override')]: true,
  [Symbol.for('fastify.display-name')]: '@labelflow/idempotency',
  [Symbol.for('plugin-meta')]: { name: '@labelflow/idempotency', fastify: '5.x' },
});
