import type { FastifyInstance } from 'fastify';
import type {} from '@labelflow/idempotency';
import { z } from 'zod';
import { can, Permission } from '@labelflow/auth';
import { ModelName, ModelVersion, ProjectId, TaskId } from '@labelflow/contracts';
import { guard, HttpError, parseInput, queryInt, type ServiceContext } from '@labelflow/service-kit';
import type { LabelSvcConfig } from '../config';
import { loadAssignment } from '../labels/repository';
import { listPrelabels, loadPolicy, savePolicy, type PolicyRecord } from './repository';

const PolicyBody = z
  .object({
    autoSubmit: z.boolean(),
    minConfidence: z.number().min(0).max(1),
    model: z.object({ name: ModelName, version: ModelVersion }).strict().optional(),
  })
  .strict();
const ProjectParams = z.object({ projectId: ProjectId });
/** The latest proposals shown, at most. */
const PrelabelsQuery = z.strictObject({ limit: queryInt(1, 200).default(50) });
const TaskParams = z.object({ taskId: TaskId });

const projectNotFound = (projectId: string) => ({ code: 'PROJECT_NOT_FOUND', message: `project ${projectId} does not exist` });
const taskNotFound = (taskId: string) => ({ code: 'TASK_NOT_FOUND', message: `label-svc knows nothing of task ${taskId}` });

/** A project that never set a policy submits nothing by itself. */
const defaultPolicy = (projectId: ProjectId) => ({ projectId, autoSubmit: false, minConfidence: 1, model: null, updatedBy: null, updatedAt: null });
const policyView = (p: PolicyRecord) => ({ projectId: p.projectId, autoSubmit: p.autoSubmit, minConfidence: p.minConfidence, model: p.model, updatedBy: p.updatedBy, updatedAt: p.updatedAt.toISOString() });

export function prelabelRoutes(app: FastifyInstance, ctx: ServiceContext<LabelSvcConfig>): void {
  // Who decides how a project's tasks get labelled: those who create its tasks (owners, managers, admins).
  app.put('/projects/:projectId/prelabel-policy', async (request) => {
    const { projectId } = parseInput(ProjectParams, request.params, 'path');
    const body = parseInput(PolicyBody, request.body);
    guard(request, Permission.taskCreate, projectId, projectNotFound(projectId));
    return request.idempotent({ project: projectId, input: { projectId, ...body } }, async (tx) => {
      const saved = await savePolicy(tx, { projectId, autoSubmit: body.autoSubmit, minConfidence: body.minConfidence, model: body.model ?? null }, request.principal.subject);
      return { status: 200, body: policyView(saved) };
    });
  });

  app.get('/projects/:projectId/prelabel-policy', async (request) => {
    const { projectId } = parseInput(ProjectParams, request.params, 'path');
    guard(request, Permission.projectRead, projectId, projectNotFound(projectId));
    const policy = await loadPolicy(ctx.pool, projectId);
    return policy ? policyView(policy) : defaultPolicy(projectId);
  });

  // A task's proposals for its current attempt, to its assignee and to whoever may see people
  // (managers, owners, admins). A proposal that came before the assignment is shown once it arrives.
  app.get('/tasks/:taskId/prelabels', async (request) => {
    const { taskId } = parseInput(TaskParams, request.params, 'path');
    const { limit } = parseInput(PrelabelsQuery, request.query, 'query');
    const assignment = await loadAssignment(ctx.pool, taskId);
    if (!assignment) throw new HttpError(404, 'TASK_NOT_FOUND', `label-svc knows nothing of task ${taskId}`);
    guard(request, Permission.labelsRead, assignment.projectId, taskNotFound(taskId));
    if (!can(request.principal, Permission.peopleRead, assignment.projectId) && assignment.annotatorId !== request.principal.subject) {
      throw new HttpError(403, 'NOT_ASSIGNEE', `the proposals of task ${taskId} are shown to its assignee and to the project's managers`);
    }
    // Each model version is a proposal of its own: a worker stamping a build id in the version
    // makes as many as it likes, so the list is bounded to the latest ones.
    const rows = await listPrelabels(ctx.pool, taskId, assignment.attempt, assignment.projectId, limit + 1);
    return {
      taskId,
      attempt: assignment.attempt,
      truncated: rows.length > limit,
      prelabels: rows.slice(rows.length > limit ? 1 : 0).map((p) => ({
        proposalId: p.proposalId,
        model: p.model,
        annotations: p.annotations,
        autoSubmitted: p.autoSubmitted,
        proposedAt: p.proposedAt,
        receivedAt: p.receivedAt.toISOString(),
      })),
    };
  });
}
