import type { FastifyReply, FastifyRequest } from 'fastify';
import type { Redis } from 'ioredis';
import type pg from 'pg';
import type { Logger, Metrics } from '@labelflow/telemetry';
import { IdempotencyError, IdempotencyErrors } from './errors';

export interface IdempotencyPluginOptions {
  readonly pool: pg.Pool;
  /** The fast path; without it (or while it fails) PostgreSQL alone gives the same guarantees. */
  readonly redis?: Redis;
  /** Redis key prefix, one per service: `lf:idem:<topicPrefix>:<service>`. */
  readonly namespace: string;
  /** How long a completed response is kept and replayed. Default 24 h. */
  readonly ttlMs?: number;
  /** How long a running request holds its key in Redis, and the lock timeout of the command's own locks. Default 30 s. */
  readonly lockMs?: number;
  /**
   * How long a request waits in PostgreSQL for another holder of its key that Redis did not tell
   * it of (Redis away or not configured) before it answers 409; at most `lockMs`. Default 2 s.
   */
  readonly duplicateWaitMs?: number;
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
  /**
   * Wraps the command inside its transaction, told the request and the transaction's client: the
   * services give the client the request's trace there, for the events the command emits.
   */
  readonly transactionBody?: TransactionBody;
}

export interface IdempotentOptions {
  /** Answer 400 IDEMPOTENCY_KEY_REQUIRED when the header is absent. Default false. */
  readonly required?: boolean;
  /** The project the command acts on (second part of the scope); `-` when absent. */
  readonly project?: string | null;
  /**
   * The request as the route parsed it (path, query and body after validation, actor fields
   * resolved): fingerprinted instead of the raw request, so that spellings the route reads as one
   * request are one request for the key. Without it, no body and `{}`, or a UUID in another letter
   * case, are different requests and the retry is answered 422 IDEMPOTENCY_KEY_REUSED.
   */
  readonly input?: unknown;
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

const DAY_MS = 24 * 3600_000;

/**
 * How long a request waits in PostgreSQL for another holder of its key when Redis did not tell it
 * of one (Redis away, or not configured): a command that ends meanwhile is replayed at once, a
 * longer one answers 409. Waiting the whole `lockMs` would hold a pool connection per retry of a
 * slow request, and a client retrying a few of them would leave every route without connections.
 */
export const DUPLICATE_WAIT_MS = 2_000;

/** The options with their defaults applied. */
export interface ResolvedOptions {
  readonly ttlMs: number;
  readonly lockMs: number;
  readonly duplicateWaitMs: number;
  readonly redisTimeoutMs: number;
  readonly breaker: { readonly failureThreshold: number; readonly openMs: number };
  readonly now: () => number;
}

/** Refuses options the plugin cannot run with, at registration rather than on the first request. */
export function resolveOptions(options: IdempotencyPluginOptions): ResolvedOptions {
  const bad = (message: string) => new IdempotencyError(IdempotencyErrors.CONFIG_INVALID, message);
  if (!options.pool) throw bad('idempotency: pool is required');
  if (typeof options.callerOf !== 'function') throw bad('idempotency: callerOf is required (the authenticated caller scopes every key)');
  if (!options.namespace || /\s/.test(options.namespace)) throw bad('idempotency: namespace must be a non-empty string without spaces');
  for (const [name, value] of [['ttlMs', options.ttlMs], ['lockMs', options.lockMs], ['duplicateWaitMs', options.duplicateWaitMs], ['redisTimeoutMs', options.redisTimeoutMs]] as const) {
    if (value !== undefined && !(Number.isInteger(value) && value > 0)) throw bad(`idempotency: ${name} must be a positive integer (ms), got ${value}`);
  }
  return {
    ttlMs: options.ttlMs ?? DAY_MS,
    lockMs: options.lockMs ?? 30_000,
    duplicateWaitMs: options.duplicateWaitMs ?? DUPLICATE_WAIT_MS,
    redisTimeoutMs: options.redisTimeoutMs ?? 200,
    breaker: { failureThreshold: options.breaker?.failureThreshold ?? 3, openMs: options.breaker?.openMs ?? 1_000 },
    now: options.now ?? Date.now,
  };
}

/** What a command runs in: its request and the client of its transaction. */
export interface CommandScope {
  readonly request: FastifyRequest;
  readonly tx: pg.PoolClient;
}
export type TransactionBody = <T>(fn: () => Promise<T>, scope: CommandScope) => Promise<T>;
