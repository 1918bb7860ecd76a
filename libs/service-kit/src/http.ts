import type { Socket } from 'node:net';
import Fastify, { LogController, type FastifyBaseLogger, type FastifyError, type FastifyInstance, type FastifyReply, type FastifyRequest } from 'fastify';
import type { z } from 'zod';
import { can, installAuth, Permission, type AuthHookOptions } from '@labelflow/auth';
import type { ErrorBody } from '@labelflow/contracts';
import { continuedTraceHeaders, incomingTraceHeaders, startSpan, tracingEnabled, type Logger, type Metrics, type SagaFacts, type TraceHeaders, type TraceSpan } from '@labelflow/telemetry';
import { hasJsonStringLongerThan, isTransientDbError, V8_LENGTH_HASHED_STRING } from './db';
import { HttpError, ServiceKitError, ServiceKitErrors } from './errors';
import { PREFERENCE_APPLIED_HEADER } from './prefer';

export interface HttpAppDeps {
  readonly logger: Logger;
  /** Named readiness probes; each throws when its dependency does not answer. */
  readonly readiness: Readonly<Record<string, () => Promise<unknown>>>;
  /**
   * Probes whose dependency the service can do without for a while (Redis: dedup falls back to the
   * Bloom filter and the inbox, Idempotency-Keys and rate limits to PostgreSQL and the process).
   * One of them down answers 200 `degraded`, naming it, not 503: a load balancer that drops every
   * instance at once because of a cache would turn a degradation into an outage.
   */
  readonly readinessOptional?: readonly string[];
  /** How long one probe may take before it counts as down; default READINESS_PROBE_TIMEOUT_MS. */
  readonly readinessTimeoutMs?: number;
  readonly metrics?: Metrics;
  readonly bodyLimit?: number;
  /** How long a body fastify reads whole (JSON, text) may take to arrive: 408 after that, and the connection closed. Default 30 s. */
  readonly bodyTimeoutMs?: number;
  /** Every route but /healthz and /readyz requires a verified bearer token (see @labelflow/auth). */
  readonly auth: AuthHookOptions;
}

/** A probe that has not answered in this long counts as down: a dependency that hangs is not ready. */
export const READINESS_PROBE_TIMEOUT_MS = 2_000;

/**
 * Addresses in an error's text (IPv4 and IPv6, host:port, the host a lookup failed for): what an
 * anonymous caller of /readyz must not learn of the network behind a service. The log keeps them.
 */
const ADDRESSES: readonly RegExp[] = [
  /\[[0-9a-f:.]+\](?::\d{1,5})?/gi,
  /(?<![\w:])(?:[0-9a-f]{0,4}:){2,7}[0-9a-f]{0,4}(?:\.\d{1,3}){0,3}(?![\w:])/gi,
  /\b\d{1,3}(?:\.\d{1,3}){3}(?::\d{1,5})?\b/g,
  /\b[a-z][a-z0-9-]*(?:\.[a-z0-9-]+)*:\d{2,5}\b/gi,
  /(?<=\b(?:ENOTFOUND|EAI_AGAIN)\s)\S+/g,
];

const withoutAddresses = (message: string): string => ADDRESSES.reduce((text, pattern) => text.replace(pattern, '<address>'), message);

/**
 * Why a check is down, for the public /readyz body. What a server answered (a PostgreSQL error
 * with its SQLSTATE, a Redis error reply) can name a user, a database or a key, so it is told by
 * its code alone (`PostgreSQL 28P01`, `Redis WRONGPASS`); other errors (a refused connection, a
 * timeout, the consumer's own account) by their text with addresses replaced. The log keeps all.
 */
export function publicReason(error: unknown): string {
  if (typeof error !== 'object' || error === null) return withoutAddresses(String(error));
  const { code, severity, name, message } = error as { code?: unknown; severity?: unknown; name?: unknown; message?: unknown };
  if (typeof severity === 'string' && typeof code === 'string') return `PostgreSQL ${code}`;
  if (name === 'ReplyError' && typeof message === 'string') return `Redis ${/^[A-Z]+/.exec(message)?.[0] ?? 'error reply'}`;
  return withoutAddresses(typeof message === 'string' ? message : String(error));
}

/**
 * Runs the readiness probes, each bounded by `timeoutMs`. Callers that come while a run is under
 * way share it, so a flood of anonymous /readyz requests costs one probe of each dependency at a
 * time, not one per request (a pool connection, a Redis ping and a Kafka request each). A probe's
 * change of state is logged with the full error; the answer carries it without addresses.
 */
export function readinessProbe(probes: HttpAppDeps['readiness'], { timeoutMs, logger }: { readonly timeoutMs: number; readonly logger: Logger }): () => Promise<Record<string, string>> {
  let running: Promise<Record<string, string>> | undefined;
  /** Each check's last outcome: a change between up and down is logged, not every changed reason (some count milliseconds). */
  const last = new Map<string, 'ok' | 'down'>();
  const once = async ([name, probe]: [string, () => Promise<unknown>]): Promise<[string, string]> => {
    let timer: NodeJS.Timeout | undefined;
    const timedOut = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new ServiceKitError(ServiceKitErrors.DEPENDENCY_DOWN, `no answer within ${timeoutMs} ms`, { retriable: true })), timeoutMs);
      timer.unref();
    });
    try {
      await Promise.race([Promise.resolve().then(probe), timedOut]);
      if (last.get(name) !== 'ok' && last.has(name)) logger.info({ check: name }, 'readiness check passes again');
      last.set(name, 'ok');
      return [name, 'ok'];
    } catch (error) {
      if (last.get(name) !== 'down') logger.warn({ err: error, check: name }, 'readiness check fails');
      last.set(name, 'down');
      return [name, `down: ${publicReason(error)}`];
    } finally {
      clearTimeout(timer);
    }
  };
  return () => {
    running ??= Promise.all(Object.entries(probes).map(once))
      .then((checks) => Object.fromEntries(checks))
      .finally(() => {
        running = undefined;
      });
    return running;
  };
}

const errorBody = (code: string, message: string, details?: unknown): ErrorBody => ({
  error: details === undefined ? { code, message } : { code, message, details },
});

/** Every request header together; Node's default is 16 KiB. */
export const MAX_HEADER_BYTES = 65_536;

/**
 * What reaches no route because it is not HTTP a server can read (a header block over
 * MAX_HEADER_BYTES, conflicting lengths, a bad chunk, bytes that are not a request line): answered
 * on the socket with the same error body as everything else, then closed. Fastify's default sends
 * a body of its own shape.
 */
function answerClientError(this: FastifyInstance, error: Error & { code?: string }, socket: Socket): void {
  if (error.code === 'ECONNRESET' || socket.destroyed) return;
  const [status, reason, body] =
    error.code === 'ERR_HTTP_REQUEST_TIMEOUT'
      ? [408, 'Request Timeout', errorBody('REQUEST_TIMEOUT', 'the request was not received in time')]
      : error.code === 'HPE_HEADER_OVERFLOW'
        ? [431, 'Request Header Fields Too Large', errorBody('HEADERS_TOO_LARGE', `the request's headers exceed ${MAX_HEADER_BYTES} bytes`)]
        : [400, 'Bad Request', errorBody('BAD_REQUEST', 'the request is not valid HTTP/1.1')];
  this.log.debug({ err: error }, 'client error answered on the socket');
  if (socket.writable) {
    const json = JSON.stringify(body);
    socket.write(`HTTP/1.1 ${status} ${reason}\r\nContent-Length: ${Buffer.byteLength(json)}\r\nContent-Type: application/json; charset=utf-8\r\nConnection: close\r\n\r\n${json}`);
  }
  socket.destroy(error);
}

/** Media types fastify reads whole before the handler runs (the import's NDJSON streams instead). */
const BUFFERED_BODY = new Set(['application/json', 'text/plain']);
const mediaTypeOf = (header: string | undefined) => (header ?? '').split(';', 1)[0]!.trim().toLowerCase();
/** Routes load balancers and Prometheus call every few seconds. */
const PROBES = new Set(['/healthz', '/readyz', '/metrics']);
/** Methods that never carry a body: no deadline to keep. Any other may (fastify reads QUERY's too). */
const BODYLESS = new Set(['GET', 'HEAD', 'TRACE']);
// The BOM is left for fastify's parser, which takes one off as its own reader would (two: 400).
const strictUtf8 = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });

/**
 * Two things fastify's own body reading lets through. A body whose bytes are not UTF-8: fastify
 * decodes it with replacement characters, so it would pass validation and be stored changed; here
 * it is a 400 `INVALID_JSON`, as the import answers such a line. And a body that never finishes: Node's
 * request timeout is off (the import streams for minutes), so a JSON body trickled a byte at a time
 * would hold its connection for good; here it gets `bodyTimeoutMs` to arrive, then a 408 and the
 * connection closed.
 */
function readBodiesStrictly(app: FastifyInstance, bodyTimeoutMs: number): void {
  // fastify's defaults: a body naming __proto__ or constructor.prototype is refused (400).
  const parseJson = app.getDefaultJsonParser('error', 'error');
  app.removeContentTypeParser('application/json');
  app.addContentTypeParser('application/json', { parseAs: 'buffer' }, (request, body, done) => {
    let text: string;
    try {
      text = strictUtf8.decode(body as Buffer);
    } catch {
      done(new HttpError(400, 'INVALID_JSON', 'request body is not valid UTF-8'), undefined);
      return;
    }
    // Keys past this length would make JSON.parse quadratic (plumbing's json-guard); no field of
    // any route takes a string near it.
    if (hasJsonStringLongerThan(body as Buffer, V8_LENGTH_HASHED_STRING)) {
      done(new HttpError(400, 'VALIDATION_FAILED', `request body holds a string over ${V8_LENGTH_HASHED_STRING} bytes, longer than any field takes`), undefined);
      return;
    }
    parseJson(request, text, done);
  });
  app.addHook('preParsing', (request, reply, payload, done) => {
    if (BODYLESS.has(request.method) || !BUFFERED_BODY.has(mediaTypeOf(request.headers['content-type']))) return done(null, payload);
    const timer = setTimeout(() => {
      // Fail the read fastify is doing, as a broken stream would: its error handler answers the
      // 408, and `Connection: close` ends the socket with the rest of the body unread. A body
      // nobody reads (a 413 or 415 already answered) is left alone: an 'error' event without a
      // listener would end the process.
      if (payload.readableEnded || reply.sent || payload.listenerCount('error') === 0) return;
      reply.header('connection', 'close');
      payload.emit('error', new HttpError(408, 'REQUEST_TIMEOUT', `the request body was not received within ${bodyTimeoutMs} ms`));
    }, bodyTimeoutMs);
    timer.unref();
    const settled = () => clearTimeout(timer);
    payload.once('end', settled);
    // Answered, or the client gone, before the body was read: nothing is left to guard.
    reply.raw.once('close', settled);
    done(null, payload);
  });
}

/** The route pattern, never the raw URL (ids in paths would make a series per task); `unmatched` for a 404. */
const routeOf = (request: FastifyRequest): string => request.routeOptions.url ?? 'unmatched';

// Long polls (Prefer: wait, up to 30 s) sit in the top buckets; commands in the lower ones.
// `long_poll` keeps them apart: a wait the client asked for is not latency.
const DURATION_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30];

/** Ids as the services issue them (decimal task ids, UUID project ids): anything else is not a saga fact. */
const ID = /^[A-Za-z0-9-]{1,64}$/;

/** What the request says of its saga: path parameters, then the body (POST /tasks names its project). */
function factsOf(request: FastifyRequest): SagaFacts {
  const params = (request.params ?? {}) as Record<string, unknown>;
  const body = (request.body !== null && typeof request.body === 'object' ? request.body : {}) as Record<string, unknown>;
  const id = (value: unknown) => (typeof value === 'string' && ID.test(value) ? value : undefined);
  const taskId = id(params.taskId);
  const projectId = id(params.projectId) ?? id(body.projectId);
  const attempt = typeof body.attempt === 'number' && Number.isInteger(body.attempt) && body.attempt > 0 ? body.attempt : undefined;
  return { ...(taskId ? { taskId } : {}), ...(projectId ? { projectId } : {}), ...(attempt ? { attempt } : {}) };
}

/**
 * The trace what a request emits continues. While a tracer records, `undefined`: the request's
 * span is the active context and the emitter reads it. Otherwise the caller's `traceparent` and
 * `tracestate`, passed on as a span started under them would (none is), so the ids still travel.
 */
export function requestTrace(request: FastifyRequest): TraceHeaders | undefined {
  return tracingEnabled() ? undefined : continuedTraceHeaders(incomingTraceHeaders(request.headers));
}

/**
 * Per-route request counts and durations and, while a tracer records, a server span per request
 * that continues an incoming W3C `traceparent`. The span is active for the handler, so the events
 * a command emits carry its trace; with tracing off nothing is made active (see `requestTrace`).
 * The saga facts become span attributes and baggage once the route and body are known.
 */
function instrument(app: FastifyInstance, metrics: Metrics | undefined): void {
  const requests = metrics?.counter('http_requests_total', 'HTTP requests by route pattern, method and status', ['method', 'route', 'status']);
  const duration = metrics?.histogram('http_request_duration_seconds', 'HTTP request duration by route pattern and method, and whether the request was a long poll (Prefer: wait honoured)', ['method', 'route', 'long_poll'], DURATION_BUCKETS);
  const spans = new WeakMap<FastifyRequest, TraceSpan>();

  app.addHook('onResponse', async (request, reply) => {
    const route = routeOf(request);
    const status = reply.statusCode;
    requests?.inc({ method: request.method, route, status: String(status) });
    duration?.observe({ method: request.method, route, long_poll: reply.hasHeader(PREFERENCE_APPLIED_HEADER) ? 'true' : 'false' }, reply.elapsedTime / 1000);
    spans.get(request)?.end({ failed: status >= 500, attributes: { 'http.response.status_code': status } });
  });
  // Decided once, when the app is made (the runtime starts tracing first): with tracing off, no
  // span and no active context; `requestTrace` hands the caller's trace to what the request emits.
  if (!tracingEnabled()) return;
  app.addHook('onRequest', (request, _reply, done) => {
    const route = routeOf(request);
    const span = startSpan(`${request.method} ${route}`, { kind: 'server', headers: incomingTraceHeaders(request.headers), attributes: { 'http.request.method': request.method, 'http.route': route } });
    if (!span) return done();
    spans.set(request, span);
    span.run(done);
  });
  // Re-entered after the body was read: the facts are known now, and the handler runs in their baggage.
  app.addHook('preHandler', (request, _reply, done) => {
    const span = spans.get(request);
    if (!span) return done();
    span.annotate(factsOf(request));
    span.run(done);
  });
  // A command that created the task learns its id only from its own answer.
  app.addHook('onSend', async (request, reply, payload) => {
    const span = spans.get(request);
    if (span && reply.statusCode < 300 && typeof payload === 'string' && payload.length < 65_536 && factsOf(request).taskId === undefined) {
      const taskId = /"taskId":"([0-9]{1,20})"/.exec(payload)?.[1];
      if (taskId) span.annotate({ taskId });
    }
    return payload;
  });
  app.addHook('onRequestAbort', async (request) => {
    spans.get(request)?.end({ failed: true, attributes: { 'labelflow.http.aborted': true } });
  });
}

/**
 * A fastify instance with the conventions every service shares: JSON errors with stable codes,
 * /healthz (process alive), /readyz (dependencies answer), /metrics, and incoming W3C trace context
 * made active for the handler so emitted events continue the caller's trace.
 */
export function createHttpApp({ logger, readiness, readinessOptional = [], readinessTimeoutMs, metrics, auth, bodyLimit = 1_048_576, bodyTimeoutMs = 30_000 }: HttpAppDeps): FastifyInstance {
  const app: FastifyInstance = Fastify({
    loggerInstance: logger.child({ component: 'http' }) as FastifyBaseLogger,
    // One access line per request (below) instead of fastify's two: each line is a synchronous
    // write, and at a few hundred requests a second the second line was pure cost.
    logController: new LogController({ disableRequestLogging: true }),
    bodyLimit,
    // Errors fastify raises before routing (a malformed URL) skip setErrorHandler; same body shape.
    frameworkErrors: (error, _request, reply) => void (reply as FastifyReply).status(400).send(errorBody('BAD_REQUEST', error.message.slice(0, 300))),
    // Node's 16 KiB for all headers together is less than a bearer token may be (16,384
    // characters, a claim naming hundreds of projects) with the rest of a request's headers.
    http: { maxHeaderSize: MAX_HEADER_BYTES },
    // Path parameters as long as the ids they carry may be: an ActorName is up to 128 characters,
    // three times that percent-encoded.
    routerOptions: { maxParamLength: 400 },
    clientErrorHandler: answerClientError,
  });

  instrument(app, metrics);
  readBodiesStrictly(app, bodyTimeoutMs);
  app.addHook('onResponse', async (request, reply) => {
    // A probe or a scrape every few seconds would drown the requests that matter: debug, unless it failed.
    const level = reply.statusCode < 400 && PROBES.has(request.routeOptions.url ?? '') ? 'debug' : 'info';
    request.log[level]({ req: { method: request.method, url: request.url }, res: { statusCode: reply.statusCode }, responseTime: reply.elapsedTime }, 'request completed');
  });
  // Before the body is read and before any route or the Idempotency-Key layer runs.
  installAuth(app, auth);
  // close() ends only the connections idle at that moment: one whose request was still running
  // (a long poll answered by the shutdown) would stay open for keepAliveTimeout and hold the close.
  let closing = false;
  app.addHook('preClose', async () => {
    closing = true;
  });
  app.addHook('onSend', async (request, reply, payload) => {
    // An answer given before the body arrived whole (401, 415, 413) closes the connection: Node
    // would otherwise keep reading, and dropping, whatever the client trickles in, for good.
    // (`complete` is Node's; an injected request has none.)
    if (closing || request.raw.complete === false) reply.header('connection', 'close');
    return payload;
  });

  app.setErrorHandler((error: FastifyError, request, reply) => {
    if (error instanceof HttpError) return reply.status(error.status).send(errorBody(error.code, error.message, error.details));
    if (error instanceof ServiceKitError && error.code === ServiceKitErrors.CONCURRENT_UPDATE) {
      return reply.status(409).send(errorBody('CONCURRENT_UPDATE', 'the resource changed concurrently; retry the request'));
    }
    if (error.code === 'FST_ERR_CTP_INVALID_JSON_BODY' || (error instanceof SyntaxError && error.statusCode === 400)) {
      return reply.status(400).send(errorBody('INVALID_JSON', `request body is not valid JSON: ${error.message}`));
    }
    if (error.code === 'FST_ERR_CTP_EMPTY_JSON_BODY') return reply.status(400).send(errorBody('INVALID_JSON', 'request body is empty'));
    if (error.code === 'FST_ERR_CTP_INVALID_MEDIA_TYPE') return reply.status(415).send(errorBody('UNSUPPORTED_MEDIA_TYPE', 'send application/json'));
    if (error.code === 'FST_ERR_CTP_BODY_TOO_LARGE') return reply.status(413).send(errorBody('BODY_TOO_LARGE', error.message));
    if (error.statusCode && error.statusCode >= 400 && error.statusCode < 500) {
      return reply.status(error.statusCode).send(errorBody(error.code ?? 'BAD_REQUEST', error.message));
    }
    // A dependency that is down (database, id source) is a passing condition: say so, and when.
    if ((error as { retriable?: boolean }).retriable === true || isTransientDbError(error)) {
      request.log.warn({ err: error }, 'request failed on a dependency that is unavailable');
      const code = (error as { code?: string }).code;
      return reply
        .status(503)
        .header('retry-after', '1')
        .send(errorBody(code && /^[A-Z_]+$/.test(code) ? code : 'SERVICE_UNAVAILABLE', 'a dependency is unavailable; retry shortly with the same Idempotency-Key'));
    }
    request.log.error({ err: error }, 'unhandled error');
    return reply.status(500).send(errorBody('INTERNAL', 'internal error'));
  });

  app.setNotFoundHandler((request, reply) => reply.status(404).send(errorBody('NOT_FOUND', `no route ${request.method} ${request.url}`)));

  app.get('/healthz', async () => ({ status: 'ok' }));
  const probeReadiness = readinessProbe(readiness, { timeoutMs: readinessTimeoutMs ?? READINESS_PROBE_TIMEOUT_MS, logger });
  app.get('/readyz', async (_request, reply) => {
    const checks = await probeReadiness();
    const down = Object.entries(checks).filter(([, state]) => state !== 'ok').map(([name]) => name);
    if (down.length === 0) return reply.status(200).send({ status: 'ready', checks });
    const degraded = down.every((name) => readinessOptional.includes(name));
    return reply.status(degraded ? 200 : 503).send({ status: degraded ? 'degraded' : 'not ready', checks });
  });
  if (metrics) {
    app.get('/metrics', async (request, reply) => {
      if (!can(request.principal, Permission.metricsRead, null)) throw new HttpError(403, 'FORBIDDEN', 'metrics are for platform admins');
      return reply.type(metrics.registry.contentType).send(await metrics.render());
    });
  }
  return app;
}

/** Validates input at the boundary; a failure is a 400 listing each problem with its path. */
export function parseInput<S extends z.ZodType>(schema: S, value: unknown, what = 'body'): z.infer<S> {
  const parsed = schema.safeParse(value);
  if (parsed.success) return parsed.data;
  // Bounded: a 1 MiB body of 90,000 unknown keys must not be answered with megabytes listing them.
  const { issues } = parsed.error;
  const details = issues.slice(0, MAX_PROBLEMS).map((i) => ({ path: clip([what, ...i.path.map(String)].join('.')), message: clip(i.message) }));
  const more = issues.length > details.length ? `; and ${issues.length - details.length} more` : '';
  throw new HttpError(400, 'VALIDATION_FAILED', `invalid ${what}: ${details.map((d) => `${d.path} ${d.message}`).join('; ')}${more}`, details);
}

/** Problems a VALIDATION_FAILED answer lists, and the characters of each path and message. */
const MAX_PROBLEMS = 20;
const MAX_PROBLEM_CHARS = 300;
const clip = (text: string): string => (text.length > MAX_PROBLEM_CHARS ? `${text.slice(0, MAX_PROBLEM_CHARS)}…` : text);

export interface MetricsAppDeps {
  readonly logger: Logger;
  readonly metrics: Metrics;
}

/**
 * `/metrics` alone, without a token, for a Prometheus inside the private network (METRICS_PORT):
 * scrapers carry no bearer token, and the main port keeps asking for a platform admin.
 */
export function createMetricsApp({ logger, metrics }: MetricsAppDeps): FastifyInstance {
  const app: FastifyInstance = Fastify({
    loggerInstance: logger.child({ component: 'metrics-http' }) as FastifyBaseLogger,
    logController: new LogController({ disableRequestLogging: true }),
  });
  app.get('/metrics', async (_request, reply) => reply.type(metrics.registry.contentType).send(await metrics.render()));
  app.setNotFoundHandler((request, reply) => reply.status(404).send(errorBody('NOT_FOUND', `no route ${request.method} ${request.url}; this port serves GET /metrics`)));
  return app;
}
