import type { FastifyInstance } from 'fastify';
import type {} from '@labelflow/idempotency';
import { z } from 'zod';
import { Attempt, ReviewerId, storable, TaskId } from '@labelflow/contracts';
import { clientGone, honourPreferWait, HttpError, parseInput, retryWhileNotYet, type Queryable, type ServiceContext } from '@labelflow/service-kit';
import type { QaSvcConfig } from '../config';
import { ReviewDecision, type ReviewRejection } from './decide';
import { executeReview } from './execute';
import { isCancelled, listReviewRows } from './repository';
import { ReviewStatus } from './state';

const DecideBody = z
  .object({
    reviewerId: ReviewerId,
    decision: z.enum([ReviewDecision.approve, ReviewDecision.reject]),
    reason: storable(z.string().trim().min(1).max(2000)).optional(),
    attempt: Attempt.optional(),
  })
  .strict();
const TaskParams = z.object({ taskId: TaskId });
const ListQuery = z.object({
  status: z.enum(Object.values(ReviewStatus) as [ReviewStatus, ...ReviewStatus[]]).optional(),
  limit: z.coerce.number().int().min(1).max(1000).default(100),
});

const statusFor: Record<ReviewRejection['code'], number> = {
  REVIEW_NOT_FOUND: 404,
  REVIEW_ALREADY_DECIDED: 409,
  REVIEW_CLOSED: 409,
  REASON_REQUIRED: 400,
  TASK_CANCELLED: 409,
  // The codes below only answer consumed events and deadlines; listed so every code has a status.
  REVIEW_EXISTS: 409,
  REVIEW_NOT_DUE: 409,
  STALE_ATTEMPT: 409,
  NOTHING_TO_UNDO: 409,
};

type Row = Awaited<ReturnType<typeof listReviewRows>>[number];
const toView = (r: Row) => ({
  taskId: r.task_id,
  attempt: r.attempt,
  projectId: r.project_id,
  annotatorId: r.annotator_id,
  status: r.status,
  reviewerId: r.reviewer_id,
  reason: r.reason,
  deadlineAt: r.deadline_at?.toISOString() ?? null,
  closeReason: r.close_reason,
  openedAt: r.opened_at.toISOString(),
  decidedAt: r.decided_at?.toISOString() ?? null,
});

export function reviewRoutes(app: FastifyInstance, ctx: ServiceContext<QaSvcConfig>): void {
  const latestView = async (taskId: string, db: Queryable = ctx.pool) => {
    const rows = await listReviewRows(db, { taskId, limit: 1000 });
    const latest = rows[rows.length - 1];
    if (!latest) throw new HttpError(404, 'REVIEW_NOT_FOUND', `no review for task ${taskId} (yet)`);
    return { ...toView(latest), taskCancelled: await isCancelled(db, taskId), history: rows.map(toView) };
  };

  // A retried decision with the same Idempotency-Key gets the first answer back, not a 409.
  // With Prefer: wait, REVIEW_NOT_FOUND (the labels have not arrived yet) is answered only once the
  // wait is over: until then each LabelSubmitted this service applies to the task decides again.
  app.post('/reviews/:taskId', async (request, reply) => {
    const { taskId } = parseInput(TaskParams, request.params, 'path');
    const body = parseInput(DecideBody, request.body);
    return retryWhileNotYet({
      signals: ctx.signals,
      taskId,
      waitMs: honourPreferWait(request, reply),
      notYet: ['REVIEW_NOT_FOUND'],
      abort: clientGone(reply),
      metrics: ctx.metrics,
      route: 'POST /reviews/:taskId',
      attempt: () =>
        request.idempotent({}, async (tx, key) => {
          const result = await executeReview(tx, { type: 'DecideReview', taskId, ...body });
          if (!result.ok) throw new HttpError(statusFor[result.reason.code], result.reason.code, result.reason.message);
          await ctx.emit(tx, result.events, key);
          return { status: 200, body: await latestView(taskId, tx) };
        }),
    });
  });

  app.get('/reviews/:taskId', async (request) => {
    const { taskId } = parseInput(TaskParams, request.params, 'path');
    return latestView(taskId);
  });

  app.get('/reviews', async (request) => {
    const query = parseInput(ListQuery, request.query, 'query');
    return { reviews: (await listReviewRows(ctx.pool, query)).map(toView) };
  });
}
