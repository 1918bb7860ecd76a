import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { Redis } from 'ioredis';
import pg from 'pg';
import Fastify, { type FastifyError } from 'fastify';
import { createMetrics, type Metrics } from '@labelflow/telemetry';
import { captureLogs, createTestDatabase, deleteRedisKeys, eventually, httpClient, metricValue, startPrivateRedis, uniqueName, type HttpClient, type PrivateServer, createTestPool } from '@labelflow/testing';
import { idempotencyMigrationSql, idempotencyPlugin, pruneIdempotencyKeys, type IdempotencyPluginOptions } from './index';

const infra = inject('infra');
const logger = captureLogs({ service: 'idempotency-test' }).logger;

interface Thing {
  readonly id: string;
  readonly name: string;
  readonly causation: string | null;
}
interface Problem {
  readonly type: string;
  readonly title: string;
  readonly status: number;
  readonly detail: string;
  readonly code: string;
}

/** A gate the test opens: the handler announces it entered, then waits until released. */
function barrier() {
  let entered!: () => void;
  let release!: () => void;
  const hasEntered = new Promise<void>((r) => (entered = r));
  const released = new Promise<void>((r) => (release = r));
  return { hasEntered, released, entered, release };
}

describe('idempotencyPlugin on real PostgreSQL and Redis', () => {
  let pool: pg.Pool;
  let dropDb: () => Promise<void>;
  let privateRedis: PrivateServer;
  const apps: FastifyInstance[] = [];
  const clients: Redis[] = [];
  const namespaces: string[] = [];
  const holds = new Map<string, ReturnType<typeof barrier>>();
  const failuresLeft = new Map<string, number>();

  beforeAll(async () => {
    const db = await createTestDatabase(infra.pgUrl, uniqueName('idem'));
    dropDb = db.drop;
    pool = createTestPool(db.url, 20);
    await pool.query(idempotencyMigrationSql);
    await pool.query(idempotencyMigrationSql); // idempotent migration
    await pool.query('CREATE TABLE effects (id uuid PRIMARY KEY, name text NOT NULL, causation text)');
    privateRedis = await startPrivateRedis();
  });
  afterAll(async () => {
    await Promise.all(apps.map((a) => a.close()));
    clients.forEach((c) => c.disconnect());
    for (const ns of namespaces) await deleteRedisKeys(infra.redisUrl, `${ns}:*`).catch(() => undefined);
    await pool?.end();
    await dropDb?.();
    await privateRedis?.destroy();
  });

  const connect = async (url: string) => {
    const redis = new Redis(url, { lazyConnect: true, maxRetriesPerRequest: 0, enableOfflineQueue: false, retryStrategy: () => 100 });
    redis.on('error', () => undefined);
    clients.push(redis);
    await redis.connect();
    return redis;
  };

  /** A thrown error with an HTTP status, as a service's route would throw. */
  class HttpError extends Error {
    constructor(readonly status: number, readonly code: string, message: string) {
      super(message);
    }
  }

  /**
   * Who the caller is. A service takes it from the verified token; this app has no authentication,
   * so a test header stands in for it (the plugin trusts whatever `callerOf` answers).
   */
  const callerOf = (request: FastifyRequest) => {
    const user = request.headers['x-test-caller'];
    return typeof user === 'string' && user !== '' ? user : 'anonymous';
  };

  /** A service-like app: JSON errors, the plugin, and routes whose command inserts an effect. */
  const start = async (over: Partial<IdempotencyPluginOptions> & { redisUrl?: string | null } = {}) => {
    const metrics = createMetrics({ service: 'idem-test', defaults: false });
    const namespace = `lf:idem:${uniqueName('t')}:svc`;
    namespaces.push(namespace);
    const redis = over.redisUrl === null ? undefined : await connect(over.redisUrl ?? infra.redisUrl);
    const app = Fastify();
    app.setErrorHandler((error: FastifyError | HttpError, _request, reply) =>
      reply.status(error instanceof HttpError ? error.status : (error.statusCode ?? 500)).send({ error: { code: error.code, message: error.message } }),
    );
    await app.register(idempotencyPlugin, { pool, ...(redis ? { redis } : {}), namespace, logger, metrics, callerOf, ...over });

    const command = (body: { name: string; reject?: boolean }) => async (tx: pg.PoolClient, key: string | undefined) => {
      const id = randomUUID();
      await tx.query('INSERT INTO effects (id, name, causation) VALUES ($1, $2, $3)', [id, body.name, key ?? null]);
      const hold = holds.get(body.name);
      if (hold) {
        hold.entered();
        await hold.released;
      }
      const fails = failuresLeft.get(body.name) ?? 0;
      if (fails > 0) {
        failuresLeft.set(body.name, fails - 1);
        throw new HttpError(503, 'DOWNSTREAM_UNAVAILABLE', 'try again');
      }
      if (body.reject) return { status: 409, body: { error: { code: 'ALREADY_CLOSED', message: 'closed' } } };
      return { status: 201, body: { id, name: body.name, causation: key ?? null }, headers: { location: `/things/${id}` } };
    };
    app.post<{ Params: { projectId: string }; Body: { name: string } }>('/projects/:projectId/things', async (request) =>
      request.idempotent({ required: true, project: request.params.projectId }, command(request.body)),
    );
    app.post<{ Params: { projectId: string }; Body: { name: string } }>('/projects/:projectId/other-things', async (request) =>
      request.idempotent({ required: true, project: request.params.projectId }, command(request.body)),
    );
    app.post<{ Body: { name: string } }>('/optional', async (request) => request.idempotent({}, command(request.body)));
    // A route that says how it read the request: a project id in any case, a name with spaces
    // around it. `x-test-legacy` leaves `input` out, as a route did before it passed one.
    app.post<{ Params: { projectId: string }; Body: { name: string } }>('/projects/:projectId/parsed-things', async (request) => {
      const input = { projectId: request.params.projectId.toLowerCase(), name: request.body.name.trim() };
      const legacy = request.headers['x-test-legacy'] === '1';
      return request.idempotent({ required: true, project: input.projectId, ...(legacy ? {} : { input }) }, command({ name: input.name }));
    });
    await app.listen({ port: 0, host: '127.0.0.1' });
    apps.push(app);
    const address = app.server.address();
    const http = httpClient(`http://127.0.0.1:${typeof address === 'object' && address ? address.port : 0}`, null, { serverErrors: 'return' });
    return { app, http, metrics, namespace, redis };
  };

  const post = (http: HttpClient, body: object, key?: string, headers: Record<string, string> = {}, project = 'p1') =>
    http.post<Thing & Problem>(`/projects/${project}/things`, body, { 'x-test-caller': 'alice', ...(key === undefined ? {} : { 'idempotency-key': key }), ...headers });
  const effects = async (name: string) => Number((await pool.query('SELECT count(*) AS n FROM effects WHERE name = $1', [name])).rows[0].n);
  const outcome = async (metrics: Metrics, o: string) => metricValue(await metrics.render(), 'idempotency_requests_total', { outcome: o });

  it('replays the stored response with Idempotent-Replayed and runs the effect once', async () => {
    const { http, metrics } = await start();
    const key = randomUUID();
    const name = uniqueName('replay');
    const first = await post(http, { name }, key);
    expect(first.status).toBe(201);
    expect(first.headers.get('idempotent-replayed')).toBeNull();
    expect(first.body.causation).toBe(key);

    const again = await post(http, { name }, `"${key}"`); // the draft's structured-string form is the same key
    expect(again.status).toBe(201);
    expect(again.body).toEqual(first.body);
    expect(again.headers.get('idempotent-replayed')).toBe('true');
    expect(again.headers.get('location')).toBe(`/things/${first.body.id}`);
    expect(await effects(name)).toBe(1);

    // The same body with its members in another order is the same request: still a replay.
    const key2 = randomUUID();
    expect((await post(http, { name: `${name}-o`, meta: { a: 1, b: [1, 2] } }, key2)).status).toBe(201);
    const reordered = await post(http, `{"meta":{"b":[1,2],"a":1.0},"name":"${name}-o"}` as unknown as object, key2);
    expect(reordered.headers.get('idempotent-replayed')).toBe('true');
    expect(await effects(`${name}-o`)).toBe(1);

    // Another caller or another project is another scope: the same key runs again there.
    expect((await post(http, { name }, key, { 'x-test-caller': 'bob' })).headers.get('idempotent-replayed')).toBeNull();
    expect((await post(http, { name }, key, {}, 'p2')).headers.get('idempotent-replayed')).toBeNull();
    expect(await effects(name)).toBe(3);
    expect(await outcome(metrics, 'replayed')).toBe(2);
    expect(await outcome(metrics, 'executed')).toBe(4);

    const rows = await pool.query('SELECT scope, status_code, expires_at - created_at AS ttl FROM idempotency_keys WHERE key = $1 ORDER BY scope', [key]);
    expect(rows.rows.map((r) => r.scope)).toEqual(['alice:p1', 'alice:p2', 'bob:p1']);
    expect(rows.rows[0].status_code).toBe(201);
  });

  it('answers 409 problem+json while the first request with the key is still running', async () => {
    const { http, metrics } = await start();
    const key = randomUUID();
    const name = uniqueName('inflight');
    const hold = barrier();
    holds.set(name, hold);
    const first = post(http, { name }, key);
    await hold.hasEntered;

    const second = await post(http, { name }, key);
    expect(second.status).toBe(409);
    expect(second.headers.get('content-type')).toMatch(/^application\/problem\+json/);
    expect(second.headers.get('retry-after')).toBe('1');
    expect(second.body).toMatchObject({ type: 'urn:labelflow:problem:idempotency-key-in-flight', status: 409, code: 'IDEMPOTENCY_KEY_IN_FLIGHT' });
    expect(second.body.title).toBeTruthy();
    expect(second.body.detail).toContain(key);
    // A different body with the same key while in flight: in flight too (whose body the running
    // request has is known only once it commits), and a reuse once it has.
    expect((await post(http, { name: `${name}-other` }, key)).status).toBe(409);

    hold.release();
    expect((await first).status).toBe(201);
    const third = await post(http, { name }, key);
    expect(third.status).toBe(201);
    expect(third.headers.get('idempotent-replayed')).toBe('true');
    expect((await post(http, { name: `${name}-other` }, key)).status).toBe(422);
    expect(await effects(name)).toBe(1);
    expect(await effects(`${name}-other`)).toBe(0);
    expect(await outcome(metrics, 'in_flight')).toBe(2);
  });

  /**
   * A request whose process "dies" mid-command: its database session goes (its transaction rolls
   * back), while the lock it took in Redis stays for lockMs, as after a SIGKILL.
   */
  const orphaned = async (http: HttpClient, name: string, key: string) => {
    const hold = barrier();
    holds.set(name, hold);
    const first = post(http, { name }, key);
    await hold.hasEntered;
    const { rows } = await pool.query<{ pid: number }>(
      `SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND state = 'idle in transaction' AND pid <> pg_backend_pid()`,
    );
    expect(rows).toHaveLength(1);
    await pool.query('SELECT pg_terminate_backend($1)', [rows[0]!.pid]);
    holds.delete(name); // the retry's own command must not wait on the dead one's barrier
    return { hold, first };
  };

  it('runs the retry of a request whose process died mid-command, instead of answering 409 until its Redis lock expires', async () => {
    const { http } = await start({ lockMs: 60_000 });
    const key = randomUUID();
    const name = uniqueName('orphaned');
    const { hold, first } = await orphaned(http, name, key);

    const retried = await post(http, { name }, key);
    expect(retried.status, JSON.stringify(retried.body)).toBe(201);
    expect(await effects(name)).toBe(1);
    hold.release();
    await first.catch(() => undefined);
    expect(await effects(name)).toBe(1);
    const replayed = await post(http, { name }, key);
    expect([replayed.status, replayed.headers.get('idempotent-replayed')]).toEqual([201, 'true']);
  });

  it('runs a corrected request under the key of one whose process died mid-command, as it would with Redis away: a lock proves nothing committed', async () => {
    const { http } = await start({ lockMs: 60_000 });
    const key = randomUUID();
    const name = uniqueName('orphaned-fixed');
    const { hold, first } = await orphaned(http, name, key);

    const corrected = await post(http, { name: `${name}-fixed` }, key);
    expect(corrected.status, JSON.stringify(corrected.body)).toBe(201);
    expect([await effects(name), await effects(`${name}-fixed`)]).toEqual([0, 1]);
    hold.release();
    await first.catch(() => undefined);
    // Now a record holds the key: the first body under it again is refused as a mismatch.
    expect((await post(http, { name }, key)).status).toBe(422);
  });

  it("gives the retry of a dead owner's request its whole lock budget for the command's own locks, not the short probe of the owner", async () => {
    const { http } = await start({ lockMs: 60_000 });
    const key = randomUUID();
    const name = uniqueName('orphaned-slow');
    const { hold, first } = await orphaned(http, name, key);

    // Another writer holds the table the command writes to, past the probe's 200 ms.
    const locker = await pool.connect();
    try {
      await locker.query('BEGIN');
      await locker.query('LOCK TABLE effects IN SHARE MODE');
      const retried = post(http, { name }, key);
      await eventually(async () => expect((await pool.query(`SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`)).rows[0].n).toBe(1));
      await new Promise((resolve) => setTimeout(resolve, 500));
      await locker.query('COMMIT');
      const answer = await retried;
      expect(answer.status, JSON.stringify(answer.body)).toBe(201);
    } finally {
      locker.release();
    }
    hold.release();
    await first.catch(() => undefined);
    expect(await effects(name)).toBe(1);
  });

  it('answers 422 problem+json when the key is reused for a different request', async () => {
    const { http, metrics } = await start();
    const key = randomUUID();
    const name = uniqueName('reuse');
    expect((await post(http, { name }, key)).status).toBe(201);
    const reused = await post(http, { name: `${name}-b` }, key);
    expect(reused.status).toBe(422);
    expect(reused.headers.get('content-type')).toMatch(/^application\/problem\+json/);
    expect(reused.body).toMatchObject({ type: 'urn:labelflow:problem:idempotency-key-reused', status: 422, code: 'IDEMPOTENCY_KEY_REUSED' });
    // The route pattern is part of the fingerprint: the same key, scope and body on another route is a reuse.
    const otherRoute = await http.post<Problem>('/projects/p1/other-things', { name }, { 'x-test-caller': 'alice', 'idempotency-key': key });
    expect(otherRoute.status).toBe(422);
    expect(otherRoute.body.code).toBe('IDEMPOTENCY_KEY_REUSED');
    expect(await effects(`${name}-b`)).toBe(0);
    expect(await outcome(metrics, 'mismatch')).toBe(2);
  });

  it('replays a retry the route reads as the same request, however its raw spelling differs, when the route passes what it read', async () => {
    const { http } = await start();
    const key = randomUUID();
    const name = uniqueName('parsed');
    const send = (project: string, body: object, headers: Record<string, string> = {}) =>
      http.post<Thing & Problem>(`/projects/${project}/parsed-things`, body, { 'x-test-caller': 'alice', 'idempotency-key': key, ...headers });
    expect((await send('P1', { name: ` ${name} ` })).status).toBe(201);
    const retried = await send('p1', { name });
    expect(retried.status).toBe(201);
    expect(retried.headers.get('idempotent-replayed')).toBe('true');
    // What it reads as another request is still one.
    expect((await send('p1', { name: `${name}-b` })).body.code).toBe('IDEMPOTENCY_KEY_REUSED');
    expect(await effects(name)).toBe(1);
  });

  it('replays a key stored before its route passed what it read, for the same raw request', async () => {
    const { http } = await start();
    const key = randomUUID();
    const name = uniqueName('upgraded');
    const send = (headers: Record<string, string> = {}) => http.post<Thing & Problem>('/projects/p1/parsed-things', { name }, { 'x-test-caller': 'alice', 'idempotency-key': key, ...headers });
    expect((await send({ 'x-test-legacy': '1' })).status).toBe(201);
    const retried = await send();
    expect(retried.status).toBe(201);
    expect(retried.headers.get('idempotent-replayed')).toBe('true');
    expect(await effects(name)).toBe(1);
  });

  it('answers 400 for a missing or invalid key, and runs unkeyed where the key is optional', async () => {
    const { http, metrics } = await start();
    const name = uniqueName('bad');
    const missing = await post(http, { name });
    expect(missing.status).toBe(400);
    expect(missing.headers.get('content-type')).toMatch(/^application\/problem\+json/);
    expect(missing.body).toMatchObject({ type: 'urn:labelflow:problem:idempotency-key-required', status: 400, code: 'IDEMPOTENCY_KEY_REQUIRED' });
    for (const bad of ['has space', 'x'.repeat(256), 'semi;colon', '']) {
      const invalid = await post(http, { name }, bad);
      expect(invalid.status, bad).toBe(400);
      expect(invalid.body.code).toBe('IDEMPOTENCY_KEY_INVALID');
    }
    expect(await effects(name)).toBe(0);

    expect((await http.post<Thing>('/optional', { name })).status).toBe(201);
    expect((await http.post<Thing>('/optional', { name })).status).toBe(201);
    expect(await effects(name)).toBe(2);
    expect(await outcome(metrics, 'missing')).toBe(1);
    expect(await outcome(metrics, 'invalid')).toBe(4);
    expect(await outcome(metrics, 'unkeyed')).toBe(2);
  });

  it('forgets a key after ttlMs: the same key runs again, and pruning deletes expired records', async () => {
    const { http } = await start({ ttlMs: 300 });
    const key = randomUUID();
    const name = uniqueName('expiry');
    expect((await post(http, { name }, key)).status).toBe(201);
    await eventually(async () => {
      const r = await post(http, { name }, key);
      expect(r.status).toBe(201);
      expect(r.headers.get('idempotent-replayed')).toBeNull();
    }, { timeoutMs: 10_000, intervalMs: 50 });
    expect(await effects(name)).toBe(2);
    // The expired record was replaced in place, never duplicated.
    expect((await pool.query('SELECT count(*)::int AS n FROM idempotency_keys WHERE key = $1', [key])).rows[0].n).toBe(1);

    const pruned = await pruneIdempotencyKeys(pool, { now: new Date(Date.now() + 48 * 3600_000), batchSize: 2 });
    expect(pruned).toBeGreaterThanOrEqual(1);
    expect((await pool.query('SELECT count(*)::int AS n FROM idempotency_keys WHERE expires_at <= now() + interval \'47 hours\'')).rows[0].n).toBe(0);
  });

  it('counts a stored response\'s lifetime from when its command finished, so a command that outlasted ttlMs is still replayed to its retry', async () => {
    let clock = Date.now();
    const { http } = await start({ ttlMs: 1_000, now: () => clock });
    const key = randomUUID();
    const name = uniqueName('slow');
    const hold = barrier();
    holds.set(name, hold);
    const first = post(http, { name }, key);
    await hold.hasEntered;
    clock += 1_500; // the command waited on locks longer than the key's whole lifetime
    hold.release();
    expect((await first).status).toBe(201);
    holds.delete(name);

    const retry = await post(http, { name }, key);
    expect(retry.status).toBe(201);
    expect(retry.headers.get('idempotent-replayed')).toBe('true');
    expect(await effects(name)).toBe(1);
    const row = await pool.query('SELECT extract(epoch FROM expires_at) * 1000 AS expires FROM idempotency_keys WHERE key = $1', [key]);
    expect(Number(row.rows[0].expires)).toBe(clock + 1_000);
  });

  it('treats a value in Redis it cannot read as no answer, not as a Redis failure, so the breaker stays closed and the value is overwritten', async () => {
    const { http, metrics, namespace, redis } = await start();
    const keys = [randomUUID(), randomUUID(), randomUUID()];
    for (const key of keys) await redis!.set(`${namespace}:alice:p1:${key}`, `D${'0'.repeat(64)}not json`);
    for (const [i, key] of keys.entries()) expect((await post(http, { name: uniqueName(`unreadable-${i}`) }, key)).status).toBe(201);
    expect(metricValue(await metrics.render(), 'idempotency_redis_fallbacks_total', { op: 'begin' })).toBe(0);
    for (const key of keys) expect((await redis!.get(`${namespace}:alice:p1:${key}`))?.slice(65)).toMatch(/^\{"status":201/);
  });

  it('releases the key when the command throws, so the retry runs; a returned 4xx is stored', async () => {
    const { http, metrics } = await start();
    const key = randomUUID();
    const name = uniqueName('throw');
    failuresLeft.set(name, 1);
    const failed = await post(http, { name }, key);
    expect(failed.status).toBe(503);
    expect(failed.body).toEqual({ error: { code: 'DOWNSTREAM_UNAVAILABLE', message: 'try again' } });
    expect(await effects(name)).toBe(0); // rolled back with the claim

    const retried = await post(http, { name }, key);
    expect(retried.status).toBe(201);
    expect(retried.headers.get('idempotent-replayed')).toBeNull();
    expect(await effects(name)).toBe(1);
    expect(await outcome(metrics, 'failed')).toBe(1);

    const rejectKey = randomUUID();
    const rejected = await post(http, { name: `${name}-r`, reject: true }, rejectKey);
    expect(rejected.status).toBe(409);
    const replayed = await post(http, { name: `${name}-r`, reject: true }, rejectKey);
    expect(replayed.status).toBe(409);
    expect(replayed.body).toEqual(rejected.body);
    expect(replayed.headers.get('idempotent-replayed')).toBe('true');
  });

  it('releases a lock that a timed-out begin left in Redis, so the retry of a failed command runs instead of answering 409', async () => {
    const { http, namespace, metrics } = await start({ redisUrl: privateRedis.url, redisTimeoutMs: 50 });
    const observer = await connect(privateRedis.url);
    const key = randomUUID();
    const name = uniqueName('late-begin');
    failuresLeft.set(name, 1);
    // Redis holds every write (the begin script included) for 2 s, far longer than the request
    // takes to reach it: the plugin gives up on the begin after 50 ms, yet Redis runs it
    // afterwards and sets this request's lock.
    await observer.call('CLIENT', 'PAUSE', '2000', 'WRITE');
    const failed = await post(http, { name }, key);
    expect(failed.status).toBe(503);
    // The begin did time out (the case under test), rather than run before or after the pause.
    expect(metricValue(await metrics.render(), 'idempotency_redis_fallbacks_total', { op: 'begin' })).toBe(1);
    await observer.set(`${namespace}:probe`, '1'); // returns once the pause is over
    await eventually(async () => expect(await observer.get(`${namespace}:alice:p1:${key}`)).toBeNull());

    const retried = await post(http, { name }, key);
    expect(retried.status).toBe(201);
    expect(await effects(name)).toBe(1);
  });

  it('replays from PostgreSQL when Redis forgot everything (FLUSHALL + SCRIPT FLUSH on a private Redis)', async () => {
    const { http, redis, namespace } = await start({ redisUrl: privateRedis.url });
    const key = randomUUID();
    const name = uniqueName('forgot');
    const first = await post(http, { name }, key);
    expect(first.status).toBe(201);
    expect((await redis!.get(`${namespace}:alice:p1:${key}`))?.startsWith('D')).toBe(true);

    await redis!.flushall();
    await redis!.script('FLUSH');
    const again = await post(http, { name }, key);
    expect(again.status).toBe(201);
    expect(again.body).toEqual(first.body);
    expect(again.headers.get('idempotent-replayed')).toBe('true');
    expect(await effects(name)).toBe(1);
    // The cache was repaired from the stored record.
    expect((await redis!.get(`${namespace}:alice:p1:${key}`))?.startsWith('D')).toBe(true);
    expect((await post(http, { name: `${name}-x` }, key)).status).toBe(422);
  });

  it('keeps its guarantees from PostgreSQL alone while Redis is down', async () => {
    // The duplicate below must wait for the held request however slow the machine, not answer 409.
    const { http, metrics } = await start({ redisUrl: privateRedis.url, redisTimeoutMs: 100, duplicateWaitMs: 60_000 });
    const key = randomUUID();
    const name = uniqueName('down');
    const first = await post(http, { name }, key);
    expect(first.status).toBe(201);

    await privateRedis.stop({ crash: true });
    const replay = await post(http, { name }, key);
    expect(replay.status).toBe(201);
    expect(replay.body).toEqual(first.body);
    expect(replay.headers.get('idempotent-replayed')).toBe('true');

    // Two concurrent requests with a new key: the second waits on the first's PRIMARY KEY insert,
    // then sees its committed record. One effect, two identical answers.
    const key2 = randomUUID();
    const name2 = uniqueName('down-race');
    const hold = barrier();
    holds.set(name2, hold);
    const a = post(http, { name: name2 }, key2);
    await hold.hasEntered;
    const b = post(http, { name: name2 }, key2);
    await eventually(async () => {
      const waiting = await pool.query("SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE 'INSERT INTO idempotency_keys%'");
      expect(waiting.rows[0].n).toBeGreaterThanOrEqual(1);
    }, { timeoutMs: 10_000, intervalMs: 25 });
    hold.release();
    const [ra, rb] = await Promise.all([a, b]);
    expect([ra.status, rb.status]).toEqual([201, 201]);
    expect(rb.body).toEqual(ra.body);
    expect(ra.headers.get('idempotent-replayed')).toBeNull();
    expect(rb.headers.get('idempotent-replayed')).toBe('true');
    expect(await effects(name2)).toBe(1);
    expect(metricValue(await metrics.render(), 'idempotency_redis_fallbacks_total')).toBeGreaterThan(0);

    await privateRedis.start();
  });

  it('bounds a PostgreSQL-only duplicate wait by lockMs and answers 409', async () => {
    const { http } = await start({ redisUrl: null, lockMs: 300 });
    const key = randomUUID();
    const name = uniqueName('pg-wait');
    const hold = barrier();
    holds.set(name, hold);
    const first = post(http, { name }, key);
    await hold.hasEntered;
    const second = await post(http, { name }, key);
    expect(second.status).toBe(409);
    expect(second.body.code).toBe('IDEMPOTENCY_KEY_IN_FLIGHT');
    hold.release();
    expect((await first).status).toBe(201);
    expect((await post(http, { name }, key)).headers.get('idempotent-replayed')).toBe('true');
    expect(await effects(name)).toBe(1);
  });

  it('answers a PostgreSQL-only duplicate of a slow request 409 within a couple of seconds, whatever lockMs, so retries do not hold the pool\'s connections', async () => {
    // lockMs longer than the test's own time-out: a duplicate that waited it out would fail the test.
    const { http } = await start({ redisUrl: null, lockMs: 120_000 });
    const key = randomUUID();
    const name = uniqueName('pg-short-wait');
    const hold = barrier();
    holds.set(name, hold);
    const first = post(http, { name }, key);
    await hold.hasEntered;
    const duplicates = await Promise.all([post(http, { name }, key), post(http, { name }, key)]);
    expect(duplicates.map((d) => d.status)).toEqual([409, 409]);
    hold.release();
    expect((await first).status).toBe(201);
    expect(await effects(name)).toBe(1);
  });
});
