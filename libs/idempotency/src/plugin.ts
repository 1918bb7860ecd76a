import { randomUUID } from 'node:crypto';
import type { FastifyInstance, FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify';
import type { PoolClient } from 'pg';
import { BreakerState, createRedisGuard } from '@labelflow/plumbing';
import { IdempotencyError, IdempotencyErrors } from './errors';
import { ClaimTimedOut, runKeyed, runUnkeyed, type KeyedRun } from './command-transaction';
import { checkIdempotencyKey, idempotencyScope, requestFingerprint } from './key';
import { IdempotencyOutcome, resolveOptions, type IdempotencyPluginOptions, type IdempotentCommand, type IdempotentOptions } from './options';
import { IDEMPOTENCY_KEY_HEADER, sendProblem, sendResult } from './problem';
import { createIdempotencyRedisTier, type IdempotencyRedisTier, type RedisSeen } from './redis-tier';
import { readIdempotencyKey, type IdempotencyRecord, type StoredResponse } from './store';

/**
 * How long a request that found another owner's lock in Redis, and no committed response, waits
 * on PostgreSQL's claim before answering 409: long enough for a live owner's row lock to show,
 * short enough that the client hears "in flight" at once.
 */
const LIVE_OWNER_PROBE_MS = 200;

async function plugin(app: FastifyInstance, options: IdempotencyPluginOptions): Promise<void> {
  const { ttlMs, lockMs, duplicateWaitMs, redisTimeoutMs, breaker, now } = resolveOptions(options);
  const { pool, namespace, logger } = options;
  const callerFor = options.callerOf;
  const wrap = options.transactionBody;
  /** The command's body for one request: the host's wrapper, told the request and the client. */
  const bodyOf =
    (request: FastifyRequest) =>
    <T>(fn: () => Promise<T>, tx: PoolClient): Promise<T> =>
      wrap ? wrap(fn, { request, tx }) : fn();
  const log = logger.child({ component: 'idempotency' });

  const requests = options.metrics?.counter('idempotency_requests_total', 'Requests through the Idempotency-Key layer, by outcome', ['outcome']);
  const fallbacks = options.metrics?.counter('idempotency_redis_fallbacks_total', 'Redis calls that failed or were skipped; PostgreSQL answered alone', ['op']);
  const count = (outcome: IdempotencyOutcome) => requests?.inc({ outcome });

  const tier: IdempotencyRedisTier | undefined = options.redis
    ? createIdempotencyRedisTier({ redis: options.redis, lockMs, timeoutMs: redisTimeoutMs, onScriptLoad: () => log.debug('idempotency script loaded') })
    : undefined;
  const guard = createRedisGuard({
    breaker,
    // Called as methods: pino's level functions read their logger from `this`.
    onTransition: (from, to) => (to === BreakerState.open ? log.warn({ from, to }, 'idempotency redis breaker') : log.info({ from, to }, 'idempotency redis breaker')),
    onFailure: (op, error) => log.debug({ err: error, op }, 'idempotency redis call failed; PostgreSQL answers alone'),
  });

  /** One Redis call, or undefined when Redis is absent, failing, or over its budget. */
  async function viaRedis<T>(op: string, call: (t: IdempotencyRedisTier) => Promise<T>): Promise<T | undefined> {
    if (!tier) return undefined;
    const answer = await guard.call(op, () => call(tier));
    if (answer.ok) return answer.value;
    fallbacks?.inc({ op });
    return undefined;
  }

  // fastify gives a handler the request and the reply, but `request.idempotent` needs the reply.
  const replies = new WeakMap<FastifyRequest, FastifyReply>();
  app.addHook('onRequest', (request, reply, done) => {
    replies.set(request, reply);
    done();
  });

  const mismatch = (reply: FastifyReply, key: string): FastifyReply => {
    count(IdempotencyOutcome.mismatch);
    return sendProblem(reply, IdempotencyErrors.KEY_REUSED, `Idempotency-Key ${key} was already used for a different request; use a new key for a new operation`);
  };

  async function replay(reply: FastifyReply, record: { fingerprint: string; response: StoredResponse }, same: (stored: string) => boolean, key: string): Promise<FastifyReply> {
    if (!same(record.fingerprint)) return mismatch(reply, key);
    count(IdempotencyOutcome.replayed);
    return sendResult(reply, record.response, true);
  }

  /** No header where the key is optional: the command runs in a plain transaction, nothing stored. */
  async function unkeyed(request: FastifyRequest, reply: FastifyReply, command: IdempotentCommand): Promise<FastifyReply> {
    let result: StoredResponse;
    try {
      result = await runUnkeyed(pool, command, bodyOf(request));
    } catch (error) {
      count(IdempotencyOutcome.failed);
      throw error;
    }
    count(result.status >= 500 ? IdempotencyOutcome.failed : IdempotencyOutcome.unkeyed);
    return sendResult(reply, result, false);
  }

  async function idempotent(request: FastifyRequest, opts: IdempotentOptions, command: IdempotentCommand): Promise<FastifyReply> {
    const reply = replies.get(request);
    if (!reply) throw new IdempotencyError(IdempotencyErrors.CONFIG_INVALID, 'register the idempotency plugin before the routes that use request.idempotent');
    const header = request.headers[IDEMPOTENCY_KEY_HEADER];

    if (header === undefined) {
      if (!opts.required) return unkeyed(request, reply, command);
      count(IdempotencyOutcome.missing);
      return sendProblem(reply, IdempotencyErrors.KEY_REQUIRED, 'this endpoint requires an Idempotency-Key header; send a unique key per operation and reuse it on every retry');
    }

    const check = checkIdempotencyKey(header);
    if (!check.ok) {
      count(IdempotencyOutcome.invalid);
      return sendProblem(reply, IdempotencyErrors.KEY_INVALID, check.reason);
    }
    const key = check.key;
    const scope = idempotencyScope(callerFor(request), opts.project);
    const shape = { method: request.method, route: request.routeOptions.url ?? request.url, params: request.params, query: request.query, body: request.body };
    const fingerprint = requestFingerprint({ ...shape, input: opts.input });
    // A key stored before its route passed `input` holds the raw request's fingerprint: a retry
    // across that upgrade is still the same request.
    let raw: string | undefined;
    const same = (stored: string) => stored === fingerprint || (opts.input !== undefined && stored === (raw ??= requestFingerprint(shape)));
    const owner = randomUUID();
    const redisKey = `${namespace}:${scope}:${key}`;
    const cache = (record: IdempotencyRecord) => viaRedis('finish', (t) => t.finish(redisKey, record.fingerprint, record.response, record.expiresAt.getTime() - now()));

    // 1. Redis: a cached response or a live lock answers without touching PostgreSQL.
    const seen: RedisSeen | undefined = await viaRedis('begin', (t) => t.begin(redisKey, fingerprint, owner));
    if (seen?.kind === 'done') return replay(reply, seen, same, key);
    if (seen?.kind === 'unreadable') log.debug({ key: redisKey }, 'idempotency redis value unreadable; PostgreSQL answers alone');
    if (seen?.kind === 'locked') {
      // PostgreSQL is the authority: a lock left behind (finish failed) must not hide a committed
      // response. A lock of another body under this key is answered as a reuse only once its
      // record shows it: a lock its owner left (a release that failed, a process killed) would
      // otherwise refuse a corrected request that Redis away would run.
      const committed = await readIdempotencyKey(pool, scope, key, new Date(now()));
      if (committed) {
        await cache(committed);
        return replay(reply, committed, same, key);
      }
      // Nothing committed: the lock's owner is still running, or its process died mid-command
      // (a SIGKILL leaves the lock for lockMs). PostgreSQL tells them apart below: a live owner
      // holds the claimed row, and the claim then times out at once into the same 409; a dead
      // owner's transaction is gone with its connection, and this retry claims the key and runs,
      // as it would with Redis away.
    }
    const ownLock = seen?.kind === 'acquired';
    // Holding Redis's lock, this request is alone with its key but in rare cases (a retry that
    // claimed it after its owner died), and waits as long as its command may: one lock timeout for
    // both, so no second SET on the common path.
    const waitMs = ownLock ? lockMs : Math.min(lockMs, seen?.kind === 'locked' ? LIVE_OWNER_PROBE_MS : duplicateWaitMs);
    // Released even when `begin` failed or timed out: Redis may still have run it and set our lock,
    // which would answer the client's retry 409 for lockMs. The release is owner-checked.
    const releaseLock = () => viaRedis('release', (t) => t.release(redisKey, fingerprint, owner));

    // 2. PostgreSQL: claim the key, run the command, store its response, commit — one transaction.
    const createdAt = now();
    const expiresAt = new Date(createdAt + ttlMs);
    let run: KeyedRun;
    try {
      run = await runKeyed(pool, command, bodyOf(request), { scope, key, fingerprint, now: new Date(createdAt), expiresAt, expiresAtOnCompletion: () => new Date(now() + ttlMs), waitMs, commandWaitMs: lockMs });
    } catch (error) {
      await releaseLock();
      // In flight whatever the lock's body: the live owner may not be the lock's (a request that
      // claimed the key after the lock's owner died never took the lock), and a 422 to a retry of
      // the live request would tell its client it failed while it commits. Once a record
      // commits, a different body under the key gets its 422 from the record.
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
      return replay(reply, run.existing, same, key);
    }

    const { result } = run;
    if (result.status >= 500) {
      await releaseLock();
      count(IdempotencyOutcome.failed);
      return sendResult(reply, result, false);
    }
    // 3. After COMMIT: the response replaces the lock in Redis (best effort; PostgreSQL has it).
    await cache({ fingerprint, response: result, expiresAt: run.expiresAt });
    count(IdempotencyOutcome.executed);
    return sendResult(reply, result, false);
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
