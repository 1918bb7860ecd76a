import type { FastifyReply } from 'fastify';
import { IdempotencyError, IdempotencyErrors, type IdempotencyErrorCode } from './errors';
import type { IdempotentResult } from './options';
import type { StoredResponse } from './store';

export const IDEMPOTENCY_KEY_HEADER = 'idempotency-key';
export const IDEMPOTENT_REPLAYED_HEADER = 'idempotent-replayed';
export const PROBLEM_CONTENT_TYPE = 'application/problem+json; charset=utf-8';
/** Base of the problem `type` URIs: `urn:labelflow:problem:idempotency-key-in-flight`, … */
export const PROBLEM_TYPE_BASE = 'urn:labelflow:problem:';

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
export type ProblemCode = keyof typeof PROBLEMS;

export function idempotencyProblem(code: ProblemCode, detail: string): IdempotencyProblem {
  const p = PROBLEMS[code];
  return { type: `${PROBLEM_TYPE_BASE}${p.slug}`, title: p.title, status: p.status, detail, code };
}

export const sendResult = (reply: FastifyReply, result: StoredResponse, replayed: boolean): FastifyReply => {
  reply.code(result.status);
  for (const [name, value] of Object.entries(result.headers ?? {})) reply.header(name, value);
  if (replayed) reply.header(IDEMPOTENT_REPLAYED_HEADER, 'true');
  return result.body === undefined ? reply.send() : reply.send(result.body);
};

export const sendProblem = (reply: FastifyReply, code: ProblemCode, detail: string): FastifyReply => {
  const problem = idempotencyProblem(code, detail);
  if (code === IdempotencyErrors.KEY_IN_FLIGHT) reply.header('retry-after', '1');
  return reply.code(problem.status).header('content-type', PROBLEM_CONTENT_TYPE).send(JSON.stringify(problem));
};

/** The command's answer as it is stored and replayed; an answer without a valid status is a bug of the route. */
export const asStored = (result: IdempotentResult): StoredResponse => {
  if (!Number.isInteger(result?.status) || result.status < 100 || result.status > 599) {
    throw new IdempotencyError(IdempotencyErrors.CONFIG_INVALID, `an idempotent command must return { status, body? }, got status ${String(result?.status)}`);
  }
  return { status: result.status, ...(result.body !== undefined ? { body: result.body } : {}), ...(result.headers ? { headers: { ...result.headers } } : {}) };
};
