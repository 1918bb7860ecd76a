import Fastify, { type FastifyBaseLogger, type FastifyError, type FastifyInstance, type FastifyReply } from 'fastify';
import type { z } from 'zod';
import { can, installAuth, Permission, type AuthHookOptions } from '@labelflow/auth';
import type { ErrorBody } from '@labelflow/contracts';
import { withTraceContext, type Logger, type Metrics } from '@labelflow/telemetry';
import { isTransientDbError } from './db';
import { HttpError, ServiceKitError, ServiceKitErrors } from './errors';

export interface HttpAppDeps {
  readonly logger: Logger;
  /** Named readiness probes; each throws when its dependency does not answer. */
  readonly readiness: Readonly<Record<string, () => Promise<unknown>>>;
  readonly metrics?: Metrics;
  readonly bodyLimit?: number;
  /** Every route but /healthz and /readyz requires a verified bearer token (see @labelflow/auth). */
  readonly auth: AuthHookOptions;
}

const errorBody = (code: string, message: string, details?: unknown): ErrorBody => ({
  error: details === undefined ? { code, message } : { code, message, details },
});

/**
 * A fastify instance with the conventions every service shares: JSON errors with stable codes,
 * /healthz (process alive), /readyz (dependencies answer), /metrics, and incoming W3C trace context
 * made active for the handler so emitted events continue the caller's trace.
 */
export function createHttpApp({ logger, readiness, metrics, auth, bodyLimit = 1_048_576 }: HttpAppDeps): FastifyInstance {
  const app: FastifyInstance = Fastify({
    loggerInstance: logger.child({ component: 'http' }) as FastifyBaseLogger,
    bodyLimit,
    // Errors fastify raises before routing (a malformed URL) skip setErrorHandler; same body shape.
    frameworkErrors: (error, _request, reply) => void (reply as FastifyReply).status(400).send(errorBody('BAD_REQUEST', error.message)),
  });

  app.addHook('onRequest', (request, _reply, done) => withTraceContext(request.headers, done));
  // Before the body is read and before any route or the Idempotency-Key layer runs.
  installAuth(app, auth);
  // close() ends only the connections idle at that moment: one whose request was still running
  // (a long poll answered by the shutdown) would stay open for keepAliveTimeout and hold the close.
  let closing = false;
  app.addHook('preClose', async () => {
    closing = true;
  });
  app.addHook('onSend', async (_request, reply, payload) => {
    if (closing) reply.header('connection', 'close');
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
  app.get('/readyz', async (_request, reply) => {
    const checks = await Promise.all(
      Object.entries(readiness).map(async ([name, probe]) => {
        try {
          await probe();
          return [name, 'ok'] as const;
        } catch (error) {
          return [name, `down: ${(error as Error).message}`] as const;
        }
      }),
    );
    const ready = checks.every(([, state]) => state === 'ok');
    return reply.status(ready ? 200 : 503).send({ status: ready ? 'ready' : 'not ready', checks: Object.fromEntries(checks) });
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
  const details = parsed.error.issues.map((i) => ({ path: [what, ...i.path.map(String)].join('.'), message: i.message }));
  throw new HttpError(400, 'VALIDATION_FAILED', `invalid ${what}: ${details.map((d) => `${d.path} ${d.message}`).join('; ')}`, details);
}
