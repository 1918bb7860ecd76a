import type { FastifyInstance } from 'fastify';
import type {} from '@labelflow/idempotency';
import { z } from 'zod';
import { Annotation, AnnotatorId, Attempt, TaskId } from '@labelflow/contracts';
import { clientGone, honourPreferWait, HttpError, parseInput, retryWhileNotYet, type ServiceContext } from '@labelflow/service-kit';
import type { LabelSvcConfig } from '../config';
import type { LabelRejection } from './decide';
import { executeLabel } from './execute';
import { listLabelRows, loadLabelTask } from './repository';

// Strict down to each annotation: a misspelt field (`confidnce`) is an error, not silently dropped.
const SubmitBody = z.object({ annotatorId: AnnotatorId, annotations: z.array(Annotation.strict()).min(1).max(1000), attempt: Attempt.optional() }).strict();
const TaskParams = z.object({ taskId: TaskId });

const statusFor: Record<LabelRejection['code'], number> = {
  VERDICT_FINAL: 409,
  ASSIGNMENT_UNKNOWN: 409,
  NOT_ASSIGNEE: 403,
  ALREADY_SUBMITTED: 409,
  LEASE_EXPIRED: 409,
  TASK_CANCELLED: 409,
  // The codes below only answer consumed events; listed so every code has a status.
  STALE_ATTEMPT: 409,
  LABEL_UNKNOWN: 404,
  LABEL_VOIDED: 409,
  LABEL_REJECTED: 409,
  NOTHING_TO_UNDO: 409,
};

export function labelRoutes(app: FastifyInstance, ctx: ServiceContext<LabelSvcConfig>): void {
  // A double-clicked or retried submission with the same Idempotency-Key gets the first answer back.
  // With Prefer: wait, ASSIGNMENT_UNKNOWN (the claim has not arrived yet) is answered only once the
  // wait is over: until then each TaskAssigned this service applies to the task decides again.
  app.post('/tasks/:taskId/labels', async (request, reply) => {
    const { taskId } = parseInput(TaskParams, request.params, 'path');
    const body = parseInput(SubmitBody, request.body);
    return retryWhileNotYet({
      signals: ctx.signals,
      taskId,
      waitMs: honourPreferWait(request, reply),
      notYet: ['ASSIGNMENT_UNKNOWN'],
      abort: clientGone(reply),
      metrics: ctx.metrics,
      route: 'POST /tasks/:taskId/labels',
      attempt: () =>
        request.idempotent({}, async (tx, key) => {
          const result = await executeLabel(tx, { type: 'SubmitLabels', taskId, ...body, now: ctx.now() });
          if (!result.ok) throw new HttpError(statusFor[result.reason.code], result.reason.code, result.reason.message);
          const [event] = await ctx.emit(tx, result.events, key);
          return { status: 201, body: { taskId, attempt: event?.attempt, status: 'submitted', eventId: event?.id } };
        }),
    });
  });

  app.get('/tasks/:taskId/labels', async (request) => {
    const { taskId } = parseInput(TaskParams, request.params, 'path');
    const state = await loadLabelTask(ctx.pool, taskId, false);
    const rows = await listLabelRows(ctx.pool, taskId);
    if (!state.assignment && rows.length === 0) throw new HttpError(404, 'TASK_NOT_FOUND', `label-svc knows nothing of task ${taskId}`);
    const { assignment } = state;
    return {
      taskId,
      cancelled: state.cancelled,
      assignment: assignment && { attempt: assignment.attempt, annotatorId: assignment.annotatorId, projectId: assignment.projectId, leaseExpiresAt: assignment.leaseExpiresAt },
      labels: rows.map((r) => ({
        attempt: r.attempt,
        annotatorId: r.annotator_id,
        annotations: r.annotations,
        status: r.status,
        voidReason: r.void_reason,
        submittedAt: r.submitted_at.toISOString(),
        updatedAt: r.updated_at.toISOString(),
      })),
    };
  });
}
