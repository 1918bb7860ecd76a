import { createHash } from 'node:crypto';
import { IdempotencyErrors } from './errors';

export const IDEMPOTENCY_KEY_MAX_LENGTH = 255;
const KEY_PATTERN = /^[A-Za-z0-9._:~+/=-]{1,255}$/;

export type KeyCheck =
  | { readonly ok: true; readonly key: string }
  | { readonly ok: false; readonly code: typeof IdempotencyErrors.KEY_INVALID; readonly reason: string };

/**
 * Validates an `Idempotency-Key` header value. The IETF draft defines the field as a structured
 * string (`Idempotency-Key: "abc"`), Stripe and most clients send the bare token (`abc`): both are
 * accepted, the quotes are not part of the key. A repeated header (joined by Node as `a, b`) fails
 * the charset and is rejected.
 */
export function checkIdempotencyKey(raw: string | readonly string[]): KeyCheck {
  if (typeof raw !== 'string') return invalid('the Idempotency-Key header must be sent once');
  const key = raw.length >= 2 && raw.startsWith('"') && raw.endsWith('"') ? raw.slice(1, -1) : raw;
  if (key.length === 0) return invalid('the Idempotency-Key header is empty');
  if (key.length > IDEMPOTENCY_KEY_MAX_LENGTH) return invalid(`the Idempotency-Key header is longer than ${IDEMPOTENCY_KEY_MAX_LENGTH} characters`);
  if (!KEY_PATTERN.test(key)) return invalid('the Idempotency-Key header may only contain A-Z a-z 0-9 and . _ : ~ + / = -');
  return { ok: true, key };
}

const invalid = (reason: string): KeyCheck => ({ ok: false, code: IdempotencyErrors.KEY_INVALID, reason });

/**
 * Canonical JSON: object keys sorted (by UTF-16 code units) at every depth, array order kept,
 * numbers written as JSON numbers (`1.0` and `1` are the same number), `undefined` members dropped
 * as `JSON.stringify` does. Two bodies that differ only in key order or whitespace are equal.
 */
export function canonicalJson(value: unknown): string {
  if (value === null || value === undefined) return 'null';
  if (typeof value === 'number') return Number.isFinite(value) ? JSON.stringify(value) : 'null';
  if (typeof value === 'bigint') return value.toString();
  if (typeof value === 'string' || typeof value === 'boolean') return JSON.stringify(value);
  if (Array.isArray(value)) return `[${value.map((v) => (v === undefined || typeof v === 'function' ? 'null' : canonicalJson(v))).join(',')}]`;
  if (value instanceof Date) return JSON.stringify(value.toISOString());
  if (typeof value === 'object') {
    const entries = Object.keys(value as Record<string, unknown>)
      .filter((k) => {
        const v = (value as Record<string, unknown>)[k];
        return v !== undefined && typeof v !== 'function';
      })
      .sort()
      .map((k) => `${JSON.stringify(k)}:${canonicalJson((value as Record<string, unknown>)[k])}`);
    return `{${entries.join(',')}}`;
  }
  return 'null';
}

export interface RequestShape {
  readonly method: string;
  /** The route pattern (`/projects/:id/tasks`), not the concrete URL. */
  readonly route: string;
  readonly params?: unknown;
  readonly query?: unknown;
  readonly body?: unknown;
  /**
   * The request as the route read it (its validated path, query and body, defaults applied):
   * fingerprinted in place of the raw params, query and body when given.
   */
  readonly input?: unknown;
}

/**
 * sha256 (hex) of the canonical form of method, route pattern, and the route's `input` when given,
 * else the raw params, query and body.
 */
export function requestFingerprint({ method, route, params, query, body, input }: RequestShape): string {
  const request = input !== undefined ? { input } : { params: params ?? {}, query: query ?? {}, body: body ?? null };
  const canonical = canonicalJson({ method: method.toUpperCase(), route, ...request });
  return createHash('sha256').update(canonical).digest('hex');
}

/**
 * The scope a key lives in: the caller and the project. Each part is URI-encoded, so the single
 * `:` separator is unambiguous; an absent project is `-`. Two users (or two projects) may use the
 * same key without seeing each other's responses.
 */
export function idempotencyScope(user: string, project?: string | null): string {
  return `${encodeURIComponent(user)}:${project ? encodeURIComponent(project) : '-'}`;
}
