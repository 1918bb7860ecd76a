import type { FastifyInstance } from 'fastify';
import { z } from 'zod';
import { can, Permission, projectsWith, type Principal } from '@labelflow/auth';
import { AnnotatorId, TaskId } from '@labelflow/contracts';
import { decodeCursor, encodeCursor, guard, HttpError, PageQuery, parseInput, withTransaction, type ServiceContext } from '@labelflow/service-kit';
import type { BillingSvcConfig } from '../config';
import { budgets, LedgerListPosition, type LedgerRecord } from '../projects/port';
import { listBillings, loadPayoutBalances, type BillingRecord } from './repository';

const AnnotatorParams = z.object({ annotatorId: AnnotatorId });
const TaskParams = z.object({ taskId: TaskId });
const PayoutQuery = z.strictObject({ ...PageQuery });

const toEntryView = ({ createdAt, ...e }: LedgerRecord) => ({ ...e, createdAt: createdAt.toISOString() });

/**
 * A credit's `actor` is the reviewer who approved it: the annotator herself sees her pay, not who
 * judged her (the review view hides the reviewer from her too). Kept for whoever holds people.read
 * in the entry's project, and when it names the caller.
 */
const payoutView = (principal: Principal, e: LedgerRecord) => {
  const { actor, ...view } = toEntryView(e);
  return actor === null || actor === principal.subject || can(principal, Permission.peopleRead, e.projectId) ? { ...view, actor } : view;
};
export const toBillingView = ({ createdAt, ...b }: BillingRecord) => ({ ...b, createdAt: createdAt.toISOString() });

/** What billing moved, read back: an annotator's payouts, and a task's billings with their ledger entries. */
export function billingReadRoutes(app: FastifyInstance, ctx: ServiceContext<BillingSvcConfig>): void {
  // An annotator sees all her payouts and her balances (one per currency); a project's managers and
  // owners see the entries of their projects only (not her balances, which span projects she may
  // have elsewhere).
  app.get('/annotators/:annotatorId/payouts', async (request) => {
    const { annotatorId } = parseInput(AnnotatorParams, request.params, 'path');
    const { limit, cursor } = parseInput(PayoutQuery, request.query, 'query');
    const { principal } = request;
    const everything = principal.admin || principal.subject === annotatorId;
    const projectIds = everything ? 'all' : projectsWith(principal, Permission.peopleRead);
    if (projectIds !== 'all' && projectIds.length === 0) throw new HttpError(404, 'ANNOTATOR_NOT_FOUND', `no payouts of ${annotatorId} you may see`);
    const after = cursor === undefined ? undefined : decodeCursor(LedgerListPosition, cursor);
    // One snapshot: the balances are the sum of the entries listed, even while a credit commits.
    const { balances, items, next, currencies } = await withTransaction(
      ctx.pool,
      async (tx) => {
        const page = await budgets.pageOfAnnotator(tx, { annotatorId, projectIds, limit, ...(after ? { afterId: after.afterId } : {}) });
        return {
          ...page,
          balances: everything ? await loadPayoutBalances(tx, annotatorId) : undefined,
          currencies: await budgets.currencies(tx, page.items.map((e) => e.projectId)),
        };
      },
      { snapshot: true },
    );
    // A manager who never paid her learns nothing about her, not even that she exists.
    if (!everything && after === undefined && items.length === 0) throw new HttpError(404, 'ANNOTATOR_NOT_FOUND', `no payouts of ${annotatorId} you may see`);
    const entries = items.map((e) => ({ ...payoutView(principal, e), currency: currencies.get(e.projectId) ?? null }));
    return { annotatorId, ...(balances === undefined ? {} : { balances }), entries, nextCursor: next === null ? null : encodeCursor(next) };
  });

  app.get('/tasks/:taskId/billing', async (request) => {
    const { taskId } = parseInput(TaskParams, request.params, 'path');
    // One snapshot: a billing and the ledger entries it moved are seen together or not at all.
    const [billings, ledger] = await withTransaction(ctx.pool, async (tx) => [await listBillings(tx, taskId), await budgets.entriesOfTask(tx, taskId)] as const, { snapshot: true });
    const projectId = billings[0]?.projectId ?? ledger[0]?.projectId;
    const notFound = { code: 'TASK_NOT_FOUND', message: `billing-svc knows nothing of task ${taskId}` };
    if (projectId === undefined && !request.principal.admin) throw new HttpError(404, notFound.code, notFound.message);
    if (projectId !== undefined) guard(request, Permission.billingRead, projectId, notFound);
    return { taskId, billings: billings.map(toBillingView), ledger: ledger.map(toEntryView) };
  });
}
