import type { FastifyInstance } from 'fastify';
import type {} from '@labelflow/idempotency';
import { z } from 'zod';
import { TaskId } from '@labelflow/contracts';
import { Permission } from '@labelflow/auth';
import { guard, HttpError, parseInput, type ServiceContext } from '@labelflow/service-kit';
import type { BillingSvcConfig } from '../config';
import type { BillingRejection } from './decide';
import { executeBilling } from './execute';
import { faultsOf } from './faults';
import { toBillingView } from './read-routes';
import { listBillings } from './repository';

const TaskParams = z.object({ taskId: TaskId });
/** The retry takes no parameters: no body, or an empty JSON object. */
const RetryBody = z.object({}).strict().optional();
const statusFor: Record<BillingRejection['code'], number> = {
  ALREADY_BILLED: 409,
  TASK_CANCELLED: 409,
  ATTEMPT_SUPERSEDED: 409,
  NOTHING_TO_RETRY: 409,
  INSUFFICIENT_BUDGET: 409,
  PROJECT_NOT_FOUND: 409,
  INJECTED_FAILURE: 409,
  PAYOUT_LIMIT_EXCEEDED: 409,
  PROJECT_MISMATCH: 409,
};

export function billingRoutes(app: FastifyInstance, ctx: ServiceContext<BillingSvcConfig>): void {
  /** After a top-up, a manager, owner or admin bills a task whose billing failed; the rest of the saga follows. */
  app.post('/tasks/:taskId/billing/retry', async (request) => {
    const { taskId } = parseInput(TaskParams, request.params, 'path');
    parseInput(RetryBody, request.body);
    // The project is the one the task was billed to; a task never billed has none to check, and only
    // a platform admin may learn that there is nothing to retry.
    const [billed] = await listBillings(ctx.pool, taskId);
    const notFound = { code: 'TASK_NOT_FOUND', message: `billing-svc knows nothing of task ${taskId}` };
    if (!billed && !request.principal.admin) throw new HttpError(404, notFound.code, notFound.message);
    guard(request, Permission.billingRetry, billed?.projectId ?? null, notFound);
    // No body and `{}` are one retry.
    return request.idempotent({ input: { taskId } }, async (tx, key) => {
      const result = await executeBilling(tx, { type: 'RetryBilling', taskId }, { faults: faultsOf(ctx.config) });
      if (!result.ok) throw new HttpError(statusFor[result.reason.code], result.reason.code, result.reason.message);
      await ctx.emit(tx, result.events, key);
      const billings = await listBillings(tx, taskId);
      return { status: 200, body: { taskId, billings: billings.map(toBillingView) } };
    });
  });
}
