import { z } from 'zod';
import { LabelflowError, type Result } from './errors';
import { ActorName } from './ids';

/**
 * Who is calling, as the gateway in front of the services says (labelflow trusts these headers
 * and authenticates no one itself): `x-labelflow-user`, and `x-labelflow-role: admin` for admins.
 */
export const CallerHeaders = { user: 'x-labelflow-user', role: 'x-labelflow-role' } as const;

export interface Caller {
  readonly user: string;
  readonly admin: boolean;
}

// The user ends up in events (`cancelledBy`) and Idempotency-Key scopes, so it obeys the same rules
// as the ids of annotators and reviewers; a role is a short lower-case word.
const CallerUser = ActorName;
const CallerRole = z.string().regex(/^[a-z][a-z0-9_-]{0,31}$/);

export const CALLER_INVALID = 'CALLER_INVALID';

type Headers = Readonly<Record<string, string | string[] | undefined>>;
const one = (v: string | string[] | undefined) => (Array.isArray(v) ? v[0] : v);

/** Reads the caller headers; absent ones mean an anonymous non-admin, malformed ones are refused. */
export function parseCaller(headers: Headers): Result<Caller> {
  const user = one(headers[CallerHeaders.user]);
  const role = one(headers[CallerHeaders.role]);
  if (user !== undefined && user !== '' && !CallerUser.safeParse(user).success) {
    return { ok: false, reason: { code: CALLER_INVALID, message: `${CallerHeaders.user} must be 1-128 characters of letters, digits, . _ @ - (starting with a letter or digit)` } };
  }
  if (role !== undefined && role !== '' && !CallerRole.safeParse(role).success) {
    return { ok: false, reason: { code: CALLER_INVALID, message: `${CallerHeaders.role} must be a lower-case word of at most 32 characters, e.g. admin` } };
  }
  return { ok: true, value: { user: user || 'anonymous', admin: role === 'admin' } };
}

/** The caller, for headers already checked at the edge; malformed ones throw CALLER_INVALID. */
export function callerOf(headers: Headers): Caller {
  const parsed = parseCaller(headers);
  if (!parsed.ok) throw new LabelflowError(CALLER_INVALID, parsed.reason.message);
  return parsed.value;
}
