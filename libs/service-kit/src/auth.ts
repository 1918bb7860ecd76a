import { readFileSync } from 'node:fs';
import type { FastifyRequest } from 'fastify';
import type { Redis } from 'ioredis';
import { z } from 'zod';
import { authorize, checkVerifierOptions, createRateLimiter, createTokenVerifier, DEV_ISSUER, type AuthHookOptions, type Permission, type TokenVerifierOptions } from '@labelflow/auth';
import type { ProjectId } from '@labelflow/contracts';
import type { Logger, Metrics } from '@labelflow/telemetry';
import { HttpError, ServiceKitError, ServiceKitErrors } from './errors';

/** The resource server's settings: who issues tokens, for whom, with which keys; and rate limits. */
export const AuthConfigShape = {
  /** Expected `iss` of every token. */
  AUTH_ISSUER: z.string().min(1).max(512),
  /** Expected `aud` (the services share one audience). */
  AUTH_AUDIENCE: z.string().min(1).max(512),
  /** The identity provider's public keys as a JWKS JSON document. */
  AUTH_PUBLIC_KEYS: z.string().max(65_536).optional(),
  /** A file holding that JWKS document (mounted secrets). */
  AUTH_PUBLIC_KEYS_FILE: z.string().min(1).optional(),
  /** The identity provider's JWKS endpoint, e.g. https://idp.example.com/.well-known/jwks.json. */
  // https, except on the loopback interface (a sidecar or a test identity provider).
  AUTH_JWKS_URL: z
    .url({ protocol: /^https?$/ })
    .refine((u) => new URL(u).protocol === 'https:' || ['127.0.0.1', 'localhost', '[::1]'].includes(new URL(u).hostname), 'must be https (http only on loopback)')
    .optional(),
  /** How long the last key set from AUTH_JWKS_URL still verifies tokens while that endpoint is down, seconds (0: not at all). */
  AUTH_JWKS_STALE_MAX_S: z.coerce.number().int().min(0).max(86_400).default(3_600),
  /** `at+jwt`: accept only RFC 9068 access tokens (their `typ` header), never an ID token of the same provider. */
  AUTH_REQUIRED_TOKEN_TYPE: z.enum(['at+jwt']).optional(),
  /** Development only: accept HS256 tokens signed with this secret (at least 32 bytes). */
  AUTH_DEV_SHARED_SECRET: z.string().optional(),
  /** Allowed clock difference for exp/nbf, seconds. */
  AUTH_CLOCK_SKEW_S: z.coerce.number().int().min(0).max(300).default(30),
  /** The longest lifetime a token may claim (exp - iat), seconds: longer-lived tokens are refused. */
  AUTH_MAX_TOKEN_LIFETIME_S: z.coerce.number().int().min(60).max(2_592_000).default(86_400),
  /** Only `development` and `test` accept AUTH_DEV_SHARED_SECRET or the development issuer (the image sets `production`). */
  NODE_ENV: z.string().optional(),
  /** Per-subject requests per second to one service, shared by its instances through Redis. */
  RATE_LIMIT_PER_SECOND: z.coerce.number().min(0.01).max(1_000_000).default(100),
  /** Requests a subject may send at once. */
  RATE_LIMIT_BURST: z.coerce.number().int().min(1).max(1_000_000).default(200),
};
const DEV_ENVIRONMENTS: readonly string[] = ['development', 'test'];
type AuthConfig = z.infer<z.ZodObject<typeof AuthConfigShape>>;

const Jwks = z.object({ keys: z.array(z.looseObject({ kty: z.string() })).min(1) }).loose();

/** Reads the key source named by the config; a problem is a message naming the variable. */
function verifierOptions(config: AuthConfig): { options?: TokenVerifierOptions; problems: string[] } {
  const sources = [config.AUTH_PUBLIC_KEYS, config.AUTH_PUBLIC_KEYS_FILE, config.AUTH_JWKS_URL].filter((s) => s !== undefined);
  if (sources.length > 1) return { problems: ['AUTH_PUBLIC_KEYS, AUTH_PUBLIC_KEYS_FILE, AUTH_JWKS_URL: set only one'] };
  let text = config.AUTH_PUBLIC_KEYS;
  if (config.AUTH_PUBLIC_KEYS_FILE) {
    try {
      text = readFileSync(config.AUTH_PUBLIC_KEYS_FILE, 'utf8');
    } catch (error) {
      return { problems: [`AUTH_PUBLIC_KEYS_FILE: cannot read ${config.AUTH_PUBLIC_KEYS_FILE}: ${(error as Error).message}`] };
    }
  }
  let jwks: z.infer<typeof Jwks> | undefined;
  if (text !== undefined) {
    let json: unknown;
    try {
      json = JSON.parse(text);
    } catch {
      return { problems: [`${config.AUTH_PUBLIC_KEYS_FILE ? 'AUTH_PUBLIC_KEYS_FILE' : 'AUTH_PUBLIC_KEYS'}: not JSON; expected a JWKS document {"keys":[...]}`] };
    }
    const parsed = Jwks.safeParse(json);
    if (!parsed.success) return { problems: [`${config.AUTH_PUBLIC_KEYS_FILE ? 'AUTH_PUBLIC_KEYS_FILE' : 'AUTH_PUBLIC_KEYS'}: expected a JWKS document {"keys":[...]} with at least one key`] };
    jwks = parsed.data;
  }
  const options: TokenVerifierOptions = {
    issuer: config.AUTH_ISSUER,
    audience: config.AUTH_AUDIENCE,
    clockToleranceS: config.AUTH_CLOCK_SKEW_S,
    maxLifetimeS: config.AUTH_MAX_TOKEN_LIFETIME_S,
    ...(config.AUTH_REQUIRED_TOKEN_TYPE ? { requiredType: config.AUTH_REQUIRED_TOKEN_TYPE } : {}),
    ...(jwks ? { jwks: jwks as TokenVerifierOptions['jwks'] } : {}),
    ...(config.AUTH_JWKS_URL ? { jwksUrl: config.AUTH_JWKS_URL, jwksStaleMaxMs: config.AUTH_JWKS_STALE_MAX_S * 1000 } : {}),
    ...(config.AUTH_DEV_SHARED_SECRET !== undefined ? { sharedSecret: config.AUTH_DEV_SHARED_SECRET } : {}),
  };
  const problems = checkVerifierOptions(options).map((p) => `AUTH_*: ${p}`);
  // Anyone who learns a shared secret can mint an admin token: only where a deployment says it is
  // a development or test one, so one that merely forgot NODE_ENV refuses it.
  if (config.AUTH_DEV_SHARED_SECRET !== undefined && !DEV_ENVIRONMENTS.includes(config.NODE_ENV ?? '')) {
    problems.push(`AUTH_DEV_SHARED_SECRET: accepted only with NODE_ENV=development or test (NODE_ENV is ${config.NODE_ENV === undefined ? 'unset' : JSON.stringify(config.NODE_ENV)}); give the identity provider's public keys`);
  }
  // The development issuer's key sits in plain text in a checkout (.local/auth), and `npm run
  // token` mints an admin with it: a deployment trusting it must say it is a development one.
  if (config.AUTH_ISSUER === DEV_ISSUER && !DEV_ENVIRONMENTS.includes(config.NODE_ENV ?? '')) {
    problems.push(`AUTH_ISSUER: "${DEV_ISSUER}" is the local development identity (npm run token), accepted only with NODE_ENV=development or test (NODE_ENV is ${config.NODE_ENV === undefined ? 'unset' : JSON.stringify(config.NODE_ENV)}); give the identity provider's issuer and keys`);
  }
  return { options, problems };
}

/** Cross-field checks of the auth settings, for `loadConfig`. */
export const authConfigProblems = (config: AuthConfig): string[] => verifierOptions(config).problems;

/** The authentication hook's options for a service: verifier from config, limits shared through Redis. */
export function authFromConfig(config: AuthConfig, deps: { redis?: Redis; namespace: string; logger: Logger; metrics?: Metrics }): AuthHookOptions {
  const { options, problems } = verifierOptions(config);
  if (!options || problems.length > 0) throw new ServiceKitError(ServiceKitErrors.CONFIG_INVALID, `invalid auth settings: ${problems.join('; ')}`, { details: problems });
  const refused = deps.metrics?.counter('http_auth_refused_total', 'Requests refused before any route ran, by reason', ['code']);
  const fallbacks = deps.metrics?.counter('rate_limit_local_decisions_total', 'Rate-limit decisions taken without Redis (it did not answer)', []);
  let warned = 0;
  let warnedStale = 0;
  return {
    verifier: createTokenVerifier({
      ...options,
      onStaleKeys: (error, ageMs) => {
        // Once a minute at most, like the rate limiter's: the operator must learn the identity
        // provider is unreachable before the stale bound runs out and every request is refused.
        if (Date.now() - warnedStale < 60_000) return;
        warnedStale = Date.now();
        deps.logger.warn({ err: error, keySetAgeS: Math.round(ageMs / 1000), staleMaxS: config.AUTH_JWKS_STALE_MAX_S }, 'tokens checked against the last key set fetched: AUTH_JWKS_URL did not answer');
      },
    }),
    rateLimiter: createRateLimiter({
      ...(deps.redis ? { redis: deps.redis } : {}),
      namespace: deps.namespace,
      perSecond: config.RATE_LIMIT_PER_SECOND,
      burst: config.RATE_LIMIT_BURST,
      onFallback: (error) => {
        fallbacks?.inc();
        // Once a minute at most: every request takes this path while Redis is away.
        if (Date.now() - warned > 60_000) {
          warned = Date.now();
          deps.logger.warn({ err: error }, 'rate limits decided per instance: redis did not answer');
        }
      },
    }),
    onRefused: (_request, code) => refused?.inc({ code }),
  };
}

/**
 * The one authorization check routes make: throws 404 (as the resource's own not-found) when the
 * caller has no part in the project, 403 FORBIDDEN when their role does not allow `permission`.
 */
export function guard(request: FastifyRequest, permission: Permission, projectId: ProjectId | null, notFound: { code: string; message: string }): void {
  const decision = authorize(request.principal, permission, projectId, notFound);
  if (!decision.ok) throw new HttpError(decision.reason.status, decision.reason.code, decision.reason.message);
}
