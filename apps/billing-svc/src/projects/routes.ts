import type { FastifyInstance } from 'fastify';
import type {} from '@labelflow/idempotency';
import { z } from 'zod';
import { Permission, projectsWith } from '@labelflow/auth';
import { AnnotatorId, Money, ProjectId, storable, TaskId } from '@labelflow/contracts';
import { decodeCursor, encodeCursor, guard, HttpError, PageQuery, parseInput, type Queryable, type ServiceContext } from '@labelflow/service-kit';
import { listBillings, loadPayoutBalance, type BillingRecord } from '../billing/repository';
import type { BillingSvcConfig } from '../config';
import { openingLedger, topUp, topUpEntry } from './budget';
import { appendLedger, insertProject, LedgerListPosition, listLedger, loadProject, loadProjectSummary, pageLedger, saveBalance, type LedgerRecord, type ProjectSummary } from './repository';

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
const PayoutQuery = z.object({ ...PageQuery });

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

const projectNotFound = (projectId: ProjectId) => ({ code: 'PROJECT_NOT_FOUND', message: `project ${projectId} does not exist` });
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
    // Roles come from the identity provider, which learns of the project from this answer: only a
    // platform admin creates projects, and then grants their owners a role in them.
    guard(request, Permission.projectCreate, null, { code: 'NOT_FOUND', message: 'no such route' });
    const projectId = ctx.newUuid() as ProjectId;
    return request.idempotent({ required: true }, async (tx) => {
      await insertProject(tx, { projectId, ...body, balance: budget });
      await appendLedger(tx, openingLedger(projectId, budget, request.principal.subject));
      return { status: 201, body: await projectView(tx, projectId) };
    });
  });

  app.post('/projects/:projectId/top-ups', async (request) => {
    const { projectId } = parseInput(ProjectParams, request.params, 'path');
    const { amount } = parseInput(TopUpBody, request.body);
    guard(request, Permission.projectTopUp, projectId, projectNotFound(projectId));
    return request.idempotent({ required: true, project: projectId }, async (tx) => {
      const project = await loadProject(tx, projectId, { forUpdate: true });
      if (!project) throw notFound(projectId);
      // The project row is locked: no debit or refund can change the totals until this commits.
      const totals = await loadProjectSummary(tx, projectId);
      const outstanding = totals ? totals.totalDebited - totals.totalRefunded : 0;
      const next = topUp({ balance: project.balance, outstanding }, amount);
      if (!next.ok) throw new HttpError(422, next.reason.code, next.reason.message);
      await saveBalance(tx, projectId, next.value, project.version);
      await appendLedger(tx, [topUpEntry(projectId, amount, request.principal.subject)]);
      return { status: 200, body: await projectView(tx, projectId) };
    });
  });

  app.get('/projects/:projectId', async (request) => {
    const { projectId } = parseInput(ProjectParams, request.params, 'path');
    guard(request, Permission.projectRead, projectId, projectNotFound(projectId));
    return projectView(ctx.pool, projectId);
  });

  // An annotator sees all her payouts and her balance; a project's managers and owners see the
  // entries of their projects only (not her balance, which spans projects she may have elsewhere).
  app.get('/annotators/:annotatorId/payouts', async (request) => {
    const { annotatorId } = parseInput(AnnotatorParams, request.params, 'path');
    const { limit, cursor } = parseInput(PayoutQuery, request.query, 'query');
    const { principal } = request;
    const everything = principal.admin || principal.subject === annotatorId;
    const projectIds = everything ? 'all' : projectsWith(principal, Permission.peopleRead);
    if (projectIds !== 'all' && projectIds.length === 0) throw new HttpError(404, 'ANNOTATOR_NOT_FOUND', `no payouts of ${annotatorId} you may see`);
    const after = cursor === undefined ? undefined : decodeCursor(LedgerListPosition, cursor);
    const [balance, { items, next }] = await Promise.all([
      everything ? loadPayoutBalance(ctx.pool, annotatorId) : Promise.resolve(undefined),
      pageLedger(ctx.pool, { annotatorId, kind: 'credit', projectIds, limit, ...(after ? { afterId: after.afterId } : {}) }),
    ]);
    // A manager who never paid her learns nothing about her, not even that she exists.
    if (!everything && after === undefined && items.length === 0) throw new HttpError(404, 'ANNOTATOR_NOT_FOUND', `no payouts of ${annotatorId} you may see`);
    return { annotatorId, ...(balance === undefined ? {} : { balance }), entries: items.map(toEntryView), nextCursor: next === null ? null : encodeCursor(next) };
  });

  app.get('/tasks/:taskId/billing', async (request) => {
    const { taskId } = parseInput(TaskParams, request.params, 'path');
    const [billings, ledger] = await Promise.all([listBillings(ctx.pool, taskId), listLedger(ctx.pool, { taskId })]);
    const projectId = billings[0]?.projectId ?? ledger[0]?.projectId;
    const notFound = { code: 'TASK_NOT_FOUND', message: `billing-svc knows nothing of task ${taskId}` };
    if (projectId === undefined && !request.principal.admin) throw new HttpError(404, notFound.code, notFound.message);
    if (projectId !== undefined) guard(request, Permission.billingRead, projectId, notFound);
    return { taskId, billings: billings.map(toBillingView), ledger: ledger.map(toEntryView) };
  });
}
