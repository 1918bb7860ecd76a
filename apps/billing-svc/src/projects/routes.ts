import type { FastifyInstance } from 'fastify';
import type {} from '@labelflow/idempotency';
import { z } from 'zod';
import { AnnotatorId, Money, ProjectId, storable, TaskId } from '@labelflow/contracts';
import { HttpError, parseInput, type Queryable, type ServiceContext } from '@labelflow/service-kit';
import { listBillings, loadPayoutBalance, type BillingRecord } from '../billing/repository';
import type { BillingSvcConfig } from '../config';
import { openingLedger, topUp, topUpEntry } from './budget';
import { appendLedger, insertProject, listLedger, loadProject, loadProjectSummary, saveBalance, type LedgerRecord, type ProjectSummary } from './repository';

const PositiveMoney = Money.min(1);
const CreateProjectBody = z.object({
  name: storable(z.string().trim().min(1).max(200)),
  budget: Money,
  pricePerTask: PositiveMoney,
  currency: z.string().regex(/^[A-Z]{3}$/, 'must be a 3-letter uppercase currency code').default('USD'),
}).strict();
const TopUpBody = z.object({ amount: PositiveMoney }).strict();
const ProjectParams = z.object({ projectId: ProjectId });
const AnnotatorParams = z.object({ annotatorId: AnnotatorId });
const TaskParams = z.object({ taskId: TaskId });

const toProjectView = (p: ProjectSummary) => ({
  projectId: p.projectId,
  name: p.name,
  currency: p.currency,
  pricePerTask: p.pricePerTask,
  balance: p.balance,
  totalToppedUp: p.totalToppedUp,
  totalDebited: p.totalDebited,
  totalRefunded: p.totalRefunded,
  createdAt: p.createdAt.toISOString(),
});
const toEntryView = ({ createdAt, ...e }: LedgerRecord) => ({ ...e, createdAt: createdAt.toISOString() });
const toBillingView = ({ createdAt, ...b }: BillingRecord) => ({ ...b, createdAt: createdAt.toISOString() });

const notFound = (projectId: ProjectId) => new HttpError(404, 'PROJECT_NOT_FOUND', `project ${projectId} does not exist`);

async function projectView(db: Queryable, projectId: ProjectId) {
  const project = await loadProjectSummary(db, projectId);
  if (!project) throw notFound(projectId);
  return toProjectView(project);
}

export function projectRoutes(app: FastifyInstance, ctx: ServiceContext<BillingSvcConfig>): void {
  // Creating a project and adding money are not naturally idempotent: a retry without the same
  // Idempotency-Key would create a second project or add the money twice, so the key is required.
  app.post('/projects', async (request) => {
    const { budget, ...body } = parseInput(CreateProjectBody, request.body);
    const projectId = ctx.newUuid() as ProjectId;
    return request.idempotent({ required: true }, async (tx) => {
      await insertProject(tx, { projectId, ...body, balance: budget });
      await appendLedger(tx, openingLedger(projectId, budget));
      return { status: 201, body: await projectView(tx, projectId) };
    });
  });

  app.post('/projects/:projectId/top-ups', async (request) => {
    const { projectId } = parseInput(ProjectParams, request.params, 'path');
    const { amount } = parseInput(TopUpBody, request.body);
    return request.idempotent({ required: true, project: projectId }, async (tx) => {
      const project = await loadProject(tx, projectId, { forUpdate: true });
      if (!project) throw notFound(projectId);
      // The project row is locked: no debit or refund can change the totals until this commits.
      const totals = await loadProjectSummary(tx, projectId);
      const outstanding = totals ? totals.totalDebited - totals.totalRefunded : 0;
      const next = topUp({ balance: project.balance, outstanding }, amount);
      if (!next.ok) throw new HttpError(422, next.reason.code, next.reason.message);
      await saveBalance(tx, projectId, next.value, project.version);
      await appendLedger(tx, [topUpEntry(projectId, amount)]);
      return { status: 200, body: await projectView(tx, projectId) };
    });
  });

  app.get('/projects/:projectId', async (request) => {
    const { projectId } = parseInput(ProjectParams, request.params, 'path');
    return projectView(ctx.pool, projectId);
  });

  app.get('/annotators/:annotatorId/payouts', async (request) => {
    const { annotatorId } = parseInput(AnnotatorParams, request.params, 'path');
    const [balance, entries] = await Promise.all([loadPayoutBalance(ctx.pool, annotatorId), listLedger(ctx.pool, { annotatorId, kind: 'credit' })]);
    return { annotatorId, balance, entries: entries.map(toEntryView) };
  });

  app.get('/tasks/:taskId/billing', async (request) => {
    const { taskId } = parseInput(TaskParams, request.params, 'path');
    const [billings, ledger] = await Promise.all([listBillings(ctx.pool, taskId), listLedger(ctx.pool, { taskId })]);
    return { taskId, billings: billings.map(toBillingView), ledger: ledger.map(toEntryView) };
  });
}
