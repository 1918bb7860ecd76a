import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { AuthError, AuthErrors } from './errors';
import { anonymousProjects, type Principal } from './principal';
import type { RateLimiter } from './rate-limit';
import type { TokenVerifier } from './verifier';

declare module 'fastify' {
  interface FastifyRequest {
    /** The verified caller; set before any route runs (public routes: an anonymous principal). */
    principal: Principal;
  }
}

export interface AuthHookOptions {
  readonly verifier: TokenVerifier;
  /** Per-subject limits, taken after the token verifies (so only known callers spend Redis). */
  readonly rateLimiter?: RateLimiter;
  /** Routes answered without a token (probes). Default `/healthz`, `/readyz`. */
  readonly publicRoutes?: readonly string[];
  /** `realm` of the WWW-Authenticate challenge. Default `labelflow`. */
  readonly realm?: string;
  /** Told about each refused request (metrics, audit logs). */
  readonly onRefused?: (request: FastifyRequest, code: string) => void;
}

const ANONYMOUS: Principal = { subject: 'anonymous', admin: false, projects: anonymousProjects };
// The scheme is case-insensitive (RFC 7235 §2.1); the token is a compact JWS.
const BEARER = /^Bearer +([A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+)$/i;
/** Longer than any real token with its claims; longer ones are refused before they are parsed. */
const MAX_TOKEN_CHARS = 16_384;

/**
 * An `error_description` as RFC 6750 (section 3) allows it: printable ASCII without `"` and `\`,
 * and short. A refusal can quote the token's own claims (a project key, a `typ`): any other
 * character would make Node refuse to write the header, and the 401 would become a 500.
 */
const quote = (s: string) => s.replace(/["\\]/g, '').replace(/[^\x20-\x7e]/g, '?').slice(0, 300);

/**
 * Authenticates every request on `onRequest`, before its body is read: a caller without a valid
 * bearer token gets 401 with an RFC 6750 challenge and costs the service nothing more.
 */
export function installAuth(app: FastifyInstance, options: AuthHookOptions): void {
  const publicRoutes = new Set(options.publicRoutes ?? ['/healthz', '/readyz']);
  const realm = options.realm ?? 'labelflow';
  app.decorateRequest('principal', null as unknown as Principal);

  const refuse = (request: FastifyRequest, reply: FastifyReply, code: string, message: string, error?: 'invalid_request' | 'invalid_token') => {
    options.onRefused?.(request, code);
    const challenge = `Bearer realm="${realm}"${error ? `, error="${error}", error_description="${quote(message)}"` : ''}`;
    return reply.status(401).header('www-authenticate', challenge).send({ error: { code, message } });
  };

  app.addHook('onRequest', async (request, reply) => {
    if (request.routeOptions.url !== undefined && publicRoutes.has(request.routeOptions.url)) {
      request.principal = ANONYMOUS;
      return;
    }
    const header = request.headers.authorization;
    if (header === undefined || header === '') return refuse(request, reply, AuthErrors.TOKEN_MISSING, 'send Authorization: Bearer <token>');
    const match = header.length <= MAX_TOKEN_CHARS + 7 ? BEARER.exec(header) : null;
    if (!match?.[1]) return refuse(request, reply, AuthErrors.TOKEN_INVALID, 'the Authorization header must be "Bearer <JWT>"', 'invalid_request');
    let verified;
    try {
      verified = await options.verifier.verify(match[1]);
    } catch (error) {
      if (error instanceof AuthError && error.retriable) {
        request.log.warn({ err: error }, 'token keys unavailable');
        options.onRefused?.(request, error.code);
        return reply.status(503).header('retry-after', '1').send({ error: { code: error.code, message: error.message } });
      }
      throw error;
    }
    if (!verified.ok) return refuse(request, reply, AuthErrors.TOKEN_INVALID, verified.reason.message, 'invalid_token');
    request.principal = verified.value;
    if (!options.rateLimiter) return;
    const allowance = await options.rateLimiter.take(verified.value.subject);
    if (allowance.ok) return;
    options.onRefused?.(request, AuthErrors.RATE_LIMITED);
    const seconds = Math.max(1, Math.ceil(allowance.retryAfterMs / 1000));
    return reply
      .status(429)
      .header('retry-after', String(seconds))
      .send({ error: { code: AuthErrors.RATE_LIMITED, message: `too many requests from ${verified.value.subject}; retry after ${seconds} s` } });
  });
}
