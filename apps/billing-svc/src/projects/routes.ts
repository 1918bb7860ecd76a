import type { FastifyInstance } from 'fastify';
import type {} from '@labelflow/idempotency';
import { z } from 'zod';
import { Permission } from '@labelflow/auth';
import { Money, ProjectId, storable } from '@labelflow/contracts';
import { guard, HttpError, parseInput, type PoolClient, type Queryable, type ServiceContext } from '@labelflow/service-kit';
import type { BillingSvcConfig } from '../config';
import type { ProjectCommand, ProjectRejection } from './decide';
import { executeProject } from './execute';
import { loadProjectSummary, type ProjectSummary } from './repository';

const PositiveMoney = Money.min(1);
const CreateProjectBody = z.object({
  name: storable(z.string().trim().min(1).max(200)),
  budget: Money,
  pricePerTask: PositiveMoney,
  // A model's labels pay nobody: 0 (free) unless the project charges for them.
  machinePricePerTask: Money.default(0),
  currency: z.string().regex(/^[A-Z]{3}$/, 'must be a 3-letter uppercase currency code').default('USD'),
}).strict();
const TopUpBody = z.object({ amount: PositiveMoney }).strict();
const ProjectParams = z.object({ projectId: ProjectId });

const statusFor: Record<ProjectRejection['code'], number> = { PROJECT_EXISTS: 409, PROJECT_NOT_FOUND: 404, BUDGET_OVERFLOW: 422 };

const toProjectView = (p: ProjectSummary) => ({
  projectId: p.projectId,
  name: p.name,
  currency: p.currency,
  pricePerTask: p.pricePerTask,
  machinePricePerTask: p.machinePricePerTask,
  balance: p.balance,
  totalToppedUp: p.totalToppedUp,
  totalDebited: p.totalDebited,
  totalRefunded: p.totalRefunded,
  createdAt: p.createdAt.toISOString(),
});

const projectNotFound = (projectId: ProjectId) => ({ code: 'PROJECT_NOT_FOUND', message: `project ${projectId} does not exist` });

async function projectView(db: Queryable, projectId: ProjectId) {
  const project = await loadProjectSummary(db, projectId);
  if (!project) throw new HttpError(404, 'PROJECT_NOT_FOUND', `project ${projectId} does not exist`);
  return toProjectView(project);
}

/** Runs the command, then answers with the project as it now is. A rejection is thrown: not stored, so a corrected retry with the same key runs. */
async function run(tx: PoolClient, command: ProjectCommand, status: number) {
  const result = await executeProject(tx, command);
  if (!result.ok) throw new HttpError(statusFor[result.reason.code], result.reason.code, result.reason.message);
  return { status, body: await projectView(tx, command.projectId) };
}

export function projectRoutes(app: FastifyInstance, ctx: ServiceContext<BillingSvcConfig>): void {
  // Creating a project and adding money are not naturally idempotent: a retry without the same
  // Idempotency-Key would create a second project or add the money twice, so the key is required.
  app.post('/projects', async (request) => {
    const body = parseInput(CreateProjectBody, request.body);
    // Roles come from the identity provider, which learns of the project from this answer: only a
    // platform admin creates projects, and then grants their owners a role in them.
    guard(request, Permission.projectCreate, null, { code: 'NOT_FOUND', message: 'no such route' });
    const projectId = ctx.newUuid() as ProjectId;
    return request.idempotent({ required: true, input: body }, (tx) => run(tx, { type: 'CreateProject', projectId, ...body, actor: request.principal.subject }, 201));
  });

  app.post('/projects/:projectId/top-ups', async (request) => {
    const { projectId } = parseInput(ProjectParams, request.params, 'path');
    const { amount } = parseInput(TopUpBody, request.body);
    guard(request, Permission.projectTopUp, projectId, projectNotFound(projectId));
    return request.idempotent({ required: true, project: projectId, input: { projectId, amount } }, (tx) => run(tx, { type: 'TopUp', projectId, amount, actor: request.principal.subject }, 200));
  });

  app.get('/projects/:projectId', async (request) => {
    const { projectId } = parseInput(ProjectParams, request.params, 'path');
    guard(request, Permission.projectRead, projectId, projectNotFound(projectId));
    return projectView(ctx.pool, projectId);
  });
}
