import type { FastifyInstance, FastifyRequest } from 'fastify';
import type {} from '@labelflow/idempotency';
import { z } from 'zod';
import { can, Permission, projectsWith } from '@labelflow/auth';
import { Attempt, ReviewerId, storable, TaskId, type ProjectId } from '@labelflow/contracts';
import { clientGone, decodeCursor, encodeCursor, guard, honourPreferWait, HttpError, PageQuery, parseInput, retryWhileNotYet, type Queryable, type ServiceContext } from '@labelflow/service-kit';
import type { QaSvcConfig } from '../config';
import { ReviewDecision, type ReviewRejection } from './decide';
import { executeReview } from './execute';
import { isCancelled, listReviewRows, pageReviewRows, reviewProjectOf, ReviewListPosition } from './repository';
import { ReviewStatus } from './state';

const DecideBody = z
  .object({
    // The reviewer is the caller; a `reviewerId`, if sent, must name the caller.
    reviewerId: ReviewerId.optional(),
    decision: z.enum([ReviewDecision.approve, ReviewDecision.reject]),
    reason: storable(z.string().trim().min(1).max(2000)).optional(),
    attempt: Attempt.optional(),
  })
  .strict();
const TaskParams = z.object({ taskId: TaskId });
const ListQuery = z.strictObject({
  status: z.enum(Object.values(ReviewStatus) as [ReviewStatus, ...ReviewStatus[]]).optional(),
  ...PageQuery,
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
  ALREADY_BILLED: 409,
  SELF_REVIEW: 403,
};

type Row = Awaited<ReturnType<typeof listReviewRows>>[number];
/** Who labelled and who judged are shown to those people and to whoever may see people (managers, owners, admins). */
const toView = (r: Row, request: FastifyRequest) => {
  const people = can(request.principal, Permission.peopleRead, r.project_id as ProjectId);
  const shown = (id: string | null) => id === null || people || id === request.principal.subject;
  return {
    taskId: r.task_id,
    attempt: r.attempt,
    projectId: r.project_id,
    ...(shown(r.annotator_id) ? { annotatorId: r.annotator_id } : {}),
    status: r.status,
    ...(shown(r.reviewer_id) ? { reviewerId: r.reviewer_id } : {}),
    reason: r.reason,
    deadlineAt: r.deadline_at?.toISOString() ?? null,
    closeReason: r.close_reason,
    billed: r.billed,
    openedAt: r.opened_at.toISOString(),
    decidedAt: r.decided_at?.toISOString() ?? null,
  };
};

const reviewNotFound = (taskId: string) => ({ code: 'REVIEW_NOT_FOUND', message: `no review for task ${taskId} (yet)` });

export function reviewRoutes(app: FastifyInstance, ctx: ServiceContext<QaSvcConfig>): void {
  /** `cancelled`: whether the task is cancelled, when the caller already knows it (no second read). */
  const latestView = async (request: FastifyRequest, taskId: string, db: Queryable = ctx.pool, cancelled?: boolean) => {
    // The project first: a caller of another project learns nothing, and costs one row's read.
    const projectId = await reviewProjectOf(db, taskId);
    if (!projectId) throw new HttpError(404, 'REVIEW_NOT_FOUND', `no review for task ${taskId} (yet)`);
    guard(request, Permission.reviewRead, projectId, reviewNotFound(taskId));
    const rows = await listReviewRows(db, { taskId, limit: 1000 });
    const latest = rows[rows.length - 1];
    if (!latest) throw new HttpError(404, 'REVIEW_NOT_FOUND', `no review for task ${taskId} (yet)`);
    return { ...toView(latest, request), taskCancelled: cancelled ?? (await isCancelled(db, taskId)), history: rows.map((r) => toView(r, request)) };
  };

  // A retried decision with the same Idempotency-Key gets the first answer back, not a 409.
  // With Prefer: wait, REVIEW_NOT_FOUND (the labels have not arrived yet) is answered only once the
  // wait is over: until then each LabelSubmitted this service applies to the task decides again.
  app.post('/reviews/:taskId', async (request, reply) => {
    const { taskId } = parseInput(TaskParams, request.params, 'path');
    const { reviewerId: named, ...body } = parseInput(DecideBody, request.body);
    const reviewerId = request.principal.subject as ReviewerId;
    if (named !== undefined && named !== reviewerId) throw new HttpError(403, 'ACTOR_MISMATCH', `reviewerId must be the caller (${reviewerId}); leave it out`);
    return retryWhileNotYet({
      signals: ctx.signals,
      taskId,
      waitMs: honourPreferWait(request, reply, ctx.longPolls),
      recheckMs: ctx.longPolls.recheckMs,
      notYet: ['REVIEW_NOT_FOUND'],
      abort: clientGone(reply),
      metrics: ctx.metrics,
      route: 'POST /reviews/:taskId',
      attempt: async () => {
        // Until the labels arrive there is no review and no project to check: REVIEW_NOT_FOUND (not yet).
        // Without a review nothing is decided, whatever the task's state, and no other answer would
        // tell a task that exists elsewhere from one that does not.
        const projectId = await reviewProjectOf(ctx.pool, taskId);
        if (!projectId) throw new HttpError(404, 'REVIEW_NOT_FOUND', reviewNotFound(taskId).message);
        guard(request, Permission.reviewDecide, projectId, reviewNotFound(taskId));
        return request.idempotent({ input: { taskId, ...body } }, async (tx, key) => {
          const result = await executeReview(tx, { type: 'DecideReview', taskId, reviewerId, ...body });
          if (!result.ok) throw new HttpError(statusFor[result.reason.code], result.reason.code, result.reason.message);
          await ctx.emit(tx, result.events, key);
          return { status: 200, body: await latestView(request, taskId, tx, result.state.cancelled) };
        });
      },
    });
  });

  app.get('/reviews/:taskId', async (request) => {
    const { taskId } = parseInput(TaskParams, request.params, 'path');
    return latestView(request, taskId);
  });

  // Only the caller's projects.
  app.get('/reviews', async (request) => {
    const { status, limit, cursor } = parseInput(ListQuery, request.query, 'query');
    const projectIds = request.principal.admin ? 'all' : projectsWith(request.principal, Permission.reviewRead);
    const after = cursor === undefined ? undefined : decodeCursor(ReviewListPosition, cursor);
    const { items, next } = await pageReviewRows(ctx.pool, { projectIds, ...(status ? { status } : {}), limit, ...(after ? { after } : {}) });
    return { reviews: items.map((r) => toView(r, request)), nextCursor: next === null ? null : encodeCursor(next) };
  });
}
