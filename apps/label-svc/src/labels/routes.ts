import type { FastifyInstance } from 'fastify';
import type {} from '@labelflow/idempotency';
import { z } from 'zod';
import { can, canSeeProject, Permission } from '@labelflow/auth';
import { Annotation, AnnotatorId, Attempt, isMachineActor, TaskId, WorkDurationMs } from '@labelflow/contracts';
import { clientGone, guard, honourPreferWait, HttpError, parseInput, retryWhileNotYet, type ServiceContext } from '@labelflow/service-kit';
import type { LabelSvcConfig } from '../config';
import type { LabelRejection } from './decide';
import { executeLabel } from './execute';
import { listLabelRows, loadAssignment, loadTaskHead } from './repository';

// Strict down to each annotation: a misspelt field (`confidnce`) is an error, not silently dropped.
// The annotator is the caller; an `annotatorId`, if sent, must name the caller.
const SubmitBody = z.object({ annotatorId: AnnotatorId.optional(), annotations: z.array(Annotation.strict()).min(1).max(1000), attempt: Attempt.optional(), durationMs: WorkDurationMs.optional() }).strict();
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
  ALREADY_BILLED: 409,
  PROJECT_MISMATCH: 409,
  // A token subject of the machine form could otherwise be paid as a model is not (billing-svc).
  MACHINE_ACTOR_RESERVED: 403,
};

const taskNotFound = (taskId: string) => ({ code: 'TASK_NOT_FOUND', message: `label-svc knows nothing of task ${taskId}` });

export function labelRoutes(app: FastifyInstance, ctx: ServiceContext<LabelSvcConfig>): void {
  // A double-clicked or retried submission with the same Idempotency-Key gets the first answer back.
  // With Prefer: wait, ASSIGNMENT_UNKNOWN (the claim has not arrived yet) is answered only once the
  // wait is over: until then each TaskAssigned this service applies to the task decides again.
  app.post('/tasks/:taskId/labels', async (request, reply) => {
    const { taskId } = parseInput(TaskParams, request.params, 'path');
    const { annotatorId: named, ...body } = parseInput(SubmitBody, request.body);
    const annotatorId = request.principal.subject as AnnotatorId;
    if (named !== undefined && named !== annotatorId) throw new HttpError(403, 'ACTOR_MISMATCH', `annotatorId must be the caller (${annotatorId}); leave it out`);
    // Whatever the task: nobody submits under a model's name, so there is nothing to wait for either.
    if (isMachineActor(annotatorId)) throw new HttpError(403, 'MACHINE_ACTOR_RESERVED', `${annotatorId} has the form of a model's annotator id (model.<name>@<version>), reserved for machine pre-labels`);
    return retryWhileNotYet({
      signals: ctx.signals,
      taskId,
      waitMs: honourPreferWait(request, reply, ctx.longPolls),
      recheckMs: ctx.longPolls.recheckMs,
      notYet: ['ASSIGNMENT_UNKNOWN'],
      abort: clientGone(reply),
      metrics: ctx.metrics,
      route: 'POST /tasks/:taskId/labels',
      attempt: async () => {
        // The project is known once any event of the task arrived (it never changes after); before
        // that, the answer is ASSIGNMENT_UNKNOWN (not yet) whoever asks, and the command never runs
        // unchecked. Another tenant's task answers the same, so task ids cannot be probed.
        const assignment = await loadAssignment(ctx.pool, taskId);
        if (!assignment || !canSeeProject(request.principal, assignment.projectId)) {
          throw new HttpError(409, 'ASSIGNMENT_UNKNOWN', `task ${taskId} has no assignment (yet): claim it first, or retry shortly`);
        }
        guard(request, Permission.labelsSubmit, assignment.projectId, taskNotFound(taskId));
        return request.idempotent({ input: { taskId, ...body } }, async (tx, key) => {
          const result = await executeLabel(tx, { type: 'SubmitLabels', taskId, annotatorId, ...body, now: ctx.now() }, ctx.config);
          if (!result.ok) throw new HttpError(statusFor[result.reason.code], result.reason.code, result.reason.message);
          const [event] = await ctx.emit(tx, result.events, key);
          return { status: 201, body: { taskId, attempt: event?.attempt, status: 'submitted', eventId: event?.id } };
        });
      },
    });
  });

  app.get('/tasks/:taskId/labels', async (request) => {
    const { taskId } = parseInput(TaskParams, request.params, 'path');
    // The task's project first: a caller of another project learns nothing, and costs one row's read.
    const { assignment, cancelled } = await loadTaskHead(ctx.pool, taskId);
    if (!assignment) throw new HttpError(404, 'TASK_NOT_FOUND', `label-svc knows nothing of task ${taskId}`);
    guard(request, Permission.labelsRead, assignment.projectId, taskNotFound(taskId));
    const rows = await listLabelRows(ctx.pool, taskId);
    // Who labelled is shown to that annotator and to whoever may see people (managers, owners, admins).
    const people = can(request.principal, Permission.peopleRead, assignment.projectId);
    const person = (id: string | null) => (id === null || people || id === request.principal.subject ? { annotatorId: id } : {});
    // What was labelled is shown to whoever labelled it and to those who review (reviewers,
    // managers, owners; admins): another annotator of the project who claims the task after a
    // timeout or an expired lease must not be able to submit an earlier attempt's work as theirs.
    const reviews = request.principal.admin || can(request.principal, Permission.reviewDecide, assignment.projectId);
    const work = (r: { annotator_id: string | null; annotations: unknown }) => (reviews || r.annotator_id === request.principal.subject ? { annotations: r.annotations } : {});
    return {
      taskId,
      cancelled,
      assignment: { attempt: assignment.attempt, ...person(assignment.annotatorId), projectId: assignment.projectId, leaseExpiresAt: assignment.leaseExpiresAt },
      labels: rows.map((r) => ({
        attempt: r.attempt,
        ...person(r.annotator_id),
        ...work(r),
        status: r.status,
        voidReason: r.void_reason,
        billed: r.billed,
        submittedAt: r.submitted_at.toISOString(),
        updatedAt: r.updated_at.toISOString(),
      })),
    };
  });
}
