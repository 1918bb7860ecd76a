import { randomUUID } from 'node:crypto';
import type pg from 'pg';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import type { AnnotatorId, DomainEvent, EventId, ProjectId, ReviewerId, TaskId } from '@labelflow/contracts';
import { migrate, ServiceKitErrors, withTransaction } from '@labelflow/service-kit';
import { eventually, freshSnowflake, latch, freshDatabase } from '@labelflow/testing';
import { migrations } from '../migrations';
import { insertProject, listLedger, loadProject } from '../projects/repository';
import { billingBatchStore, listBillings, loadBillingTask, loadPayoutBalances, saveBillingTask } from './repository';
import { emptyBilling, evolve, type BillingStateEvent, type BillingTaskState } from './state';

const infra = inject('infra');


const price = 100;
const reviewer = 'rev-1' as ReviewerId;

describe('billing-svc billing repository', () => {
  let pool: pg.Pool;
  const db = freshDatabase(infra.pgUrl, 'billingrepo', (p) => migrate(p, migrations));
  beforeAll(async () => void (pool = await db.open()));
  afterAll(() => db.close());

  const newProject = async (balance = 1_000, currency = 'EUR') => {
    const projectId = randomUUID() as ProjectId;
    await insertProject(pool, { projectId, name: 'cats', currency, pricePerTask: price, machinePricePerTask: 0, balance });
    return projectId;
  };
  /** The annotator's payout in the currency of the projects `newProject` makes by default. */
  const payoutInEur = async (annotatorId: AnnotatorId) => (await loadPayoutBalances(pool, annotatorId)).EUR ?? 0;
  const newTaskId = () => freshSnowflake() as TaskId;
  const newAnnotator = () => `ann-${randomUUID().slice(0, 8)}` as AnnotatorId;
  type Draft = BillingStateEvent;
  const completed = (taskId: TaskId, projectId: ProjectId, annotatorId: AnnotatorId, attempt = 1): Draft => ({ type: 'BillingCompleted', version: 1, taskId, projectId, attempt, payload: { annotatorId, amount: price, approvedBy: reviewer } });
  /** Loads the task under its locks, folds `events` and saves, in one transaction, as the billing capability does. */
  const apply = (taskId: TaskId, projectId: ProjectId, events: readonly Draft[], annotators: readonly AnnotatorId[] = []) =>
    withTransaction(pool, async (tx) => {
      const before = await loadBillingTask(tx, taskId, projectId, { annotators });
      const after = events.reduce(evolve, before);
      await saveBillingTask(tx, before, after);
      return after;
    });
  /** The approval a consumed batch reads, as qa-svc publishes it. */
  const qaPassedOf = (taskId: TaskId, projectId: ProjectId, annotatorId: AnnotatorId): DomainEvent => ({
    id: freshSnowflake() as EventId,
    type: 'QaPassed',
    version: 1,
    taskId,
    projectId,
    attempt: 1,
    occurredAt: new Date().toISOString(),
    producer: 'qa-svc',
    payload: { annotatorId, reviewerId: reviewer },
  });
  const ledgerOf = async (taskId: TaskId) => (await listLedger(pool, { taskId })).map((e) => [e.kind, e.annotatorId, e.amount, e.actor]);
  /** Resolves once a session of this test's database waits for a lock another transaction holds. */
  const someoneWaitsForALock = () =>
    eventually(async () => {
      const { rows } = await pool.query<{ n: number }>("SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'");
      expect(rows[0]?.n).toBe(1);
    });

  it('loads a task billing never saw with its tombstone row made, the hinted project, and a zero payout row for the approved annotator', async () => {
    const [projectId, taskId, annotatorId] = [await newProject(), newTaskId(), newAnnotator()];
    const state = await withTransaction(pool, (tx) => loadBillingTask(tx, taskId, projectId, { annotators: [annotatorId] }));
    expect(state).toMatchObject(emptyBilling(taskId, { projectId, currency: 'EUR', pricePerTask: price, machinePricePerTask: 0, balance: 1_000, version: 1 }, { [annotatorId]: 0 }));
    expect((await pool.query('SELECT latest_attempt, cancelled_at FROM billing_tasks WHERE task_id = $1', [taskId])).rows).toEqual([{ latest_attempt: 1, cancelled_at: null }]);
    expect((await withTransaction(pool, (tx) => loadBillingTask(tx, newTaskId(), randomUUID() as ProjectId))).project).toBeNull();
  });

  it("books a model's billing as a debit of the amount only, with no credit and no payout row, and its refund likewise", async () => {
    const [projectId, taskId] = [await newProject(), newTaskId()];
    const model = 'model.cat-detector@2.1' as AnnotatorId;
    await apply(taskId, projectId, [{ type: 'BillingCompleted', version: 1, taskId, projectId, attempt: 1, payload: { annotatorId: model, amount: 30, approvedBy: reviewer } }], [model]);
    expect(await ledgerOf(taskId)).toEqual([['debit', null, 30, reviewer]]);
    expect((await pool.query('SELECT 1 FROM payouts WHERE annotator_id = $1', [model])).rows).toEqual([]);
    expect((await loadProject(pool, projectId))?.balance).toBe(970);

    await apply(taskId, projectId, [{ type: 'BillingRefunded', version: 1, taskId, projectId, attempt: 1, payload: { annotatorId: model, amount: 30, reason: 'TASK_CANCELLED', refundedBy: 'admin-1' } }]);
    expect(await ledgerOf(taskId)).toEqual([['debit', null, 30, reviewer], ['refund', null, 30, 'admin-1']]);
    expect((await pool.query('SELECT 1 FROM payouts WHERE annotator_id = $1', [model])).rows).toEqual([]);
    expect((await loadProject(pool, projectId))?.balance).toBe(1_000);
  });

  it("books nothing for a model's billing at a machine price of 0", async () => {
    const [projectId, taskId] = [await newProject(), newTaskId()];
    const model = 'model.cat-detector@2.1' as AnnotatorId;
    await apply(taskId, projectId, [{ type: 'BillingCompleted', version: 1, taskId, projectId, attempt: 1, payload: { annotatorId: model, amount: 0, approvedBy: reviewer } }], [model]);
    expect(await listBillings(pool, taskId)).toMatchObject([{ annotatorId: model, status: 'completed', amount: 0 }]);
    expect(await ledgerOf(taskId)).toEqual([]);
    expect((await loadProject(pool, projectId))?.balance).toBe(1_000);
  });

  it('books a completed billing with its debit, credit, balance and payout together, and a refund returns both', async () => {
    const [projectId, taskId, annotatorId] = [await newProject(), newTaskId(), newAnnotator()];
    await apply(taskId, projectId, [completed(taskId, projectId, annotatorId)], [annotatorId]);
    expect(await listBillings(pool, taskId)).toMatchObject([{ taskId, attempt: 1, projectId, annotatorId, status: 'completed', amount: price, reason: null, approvedBy: reviewer }]);
    expect(await ledgerOf(taskId)).toEqual([
      ['debit', null, price, reviewer],
      ['credit', annotatorId, price, reviewer],
    ]);
    expect(await loadProject(pool, projectId)).toMatchObject({ balance: 1_000 - price, version: 2 });
    expect(await payoutInEur(annotatorId)).toBe(price);

    const reloaded = await withTransaction(pool, (tx) => loadBillingTask(tx, taskId, null));
    expect(reloaded).toMatchObject({ project: { projectId, balance: 1_000 - price, version: 2 }, payouts: { [annotatorId]: price }, billings: [{ status: 'completed', amount: price }] });

    await apply(taskId, projectId, [{ type: 'BillingRefunded', version: 1, taskId, projectId, attempt: 1, payload: { annotatorId, amount: price, reason: 'TASK_CANCELLED', refundedBy: 'manager-1' } }]);
    expect(await listBillings(pool, taskId)).toMatchObject([{ status: 'refunded', reason: 'TASK_CANCELLED', approvedBy: reviewer }]);
    expect((await ledgerOf(taskId)).slice(2)).toEqual([
      ['refund', null, price, 'manager-1'],
      ['reversal', annotatorId, price, 'manager-1'],
    ]);
    expect(await loadProject(pool, projectId)).toMatchObject({ balance: 1_000, version: 3 });
    expect(await payoutInEur(annotatorId)).toBe(0);
  });

  it('keeps a failed billing without booking anything, and books it once a retry completes it', async () => {
    const [projectId, taskId, annotatorId] = [await newProject(0), newTaskId(), newAnnotator()];
    await apply(taskId, projectId, [{ type: 'BillingFailed', version: 1, taskId, projectId, attempt: 1, payload: { annotatorId, reason: 'INSUFFICIENT_BUDGET', detail: 'balance 0', approvedBy: reviewer } }], [annotatorId]);
    expect(await listBillings(pool, taskId)).toMatchObject([{ status: 'failed', amount: price, reason: 'INSUFFICIENT_BUDGET' }]);
    expect(await ledgerOf(taskId)).toEqual([]);
    await pool.query('UPDATE projects SET balance = 500 WHERE project_id = $1', [projectId]);
    await apply(taskId, projectId, [{ type: 'BillingCompleted', version: 1, taskId, projectId, attempt: 1, payload: { annotatorId, amount: price } }]);
    expect(await listBillings(pool, taskId)).toMatchObject([{ status: 'completed', reason: null, approvedBy: reviewer }]);
    expect(await ledgerOf(taskId)).toEqual([
      ['debit', null, price, reviewer],
      ['credit', annotatorId, price, reviewer],
    ]);
  });

  it('refuses a save from a state that is no longer current with a retriable CONCURRENT_UPDATE, so an attempt is never booked twice', async () => {
    const [projectId, taskId, annotatorId] = [await newProject(), newTaskId(), newAnnotator()];
    const stale = await withTransaction(pool, (tx) => loadBillingTask(tx, taskId, projectId, { annotators: [annotatorId] }));
    await apply(taskId, projectId, [completed(taskId, projectId, annotatorId)], [annotatorId]);
    const again = withTransaction(pool, (tx) => saveBillingTask(tx, stale, evolve(stale, completed(taskId, projectId, annotatorId))));
    await expect(again).rejects.toMatchObject({ code: ServiceKitErrors.CONCURRENT_UPDATE, retriable: true });
    // Same balance, only the billing's own compare-and-set stands between it and a second booking.
    const sameBalance: BillingTaskState = { ...stale, project: null };
    const billedAgain = withTransaction(pool, (tx) => saveBillingTask(tx, sameBalance, evolve(sameBalance, completed(taskId, projectId, annotatorId))));
    await expect(billedAgain).rejects.toMatchObject({ code: ServiceKitErrors.CONCURRENT_UPDATE, retriable: true });
    expect(await ledgerOf(taskId)).toHaveLength(2);
    expect(await loadProject(pool, projectId)).toMatchObject({ balance: 1_000 - price, version: 2 });
    expect(await payoutInEur(annotatorId)).toBe(price);
  });

  it("serializes two writers of one task on its row: the second load waits for the first's commit and sees its billing", async () => {
    const [projectId, taskId, annotatorId] = [await newProject(), newTaskId(), newAnnotator()];
    const [firstSaved, commit] = [latch(), latch()];
    const first = withTransaction(pool, async (tx) => {
      const before = await loadBillingTask(tx, taskId, projectId, { annotators: [annotatorId] });
      await saveBillingTask(tx, before, evolve(before, completed(taskId, projectId, annotatorId)));
      firstSaved.open();
      await commit.opened;
    });
    await firstSaved.opened;
    const second = withTransaction(pool, (tx) => loadBillingTask(tx, taskId, projectId, { annotators: [annotatorId] }));
    await someoneWaitsForALock();
    commit.open();
    await first;
    expect(await second).toMatchObject({ billings: [{ status: 'completed' }], project: { balance: 1_000 - price, version: 2 }, payouts: { [annotatorId]: price } });
  });

  it('keeps the tombstones a cancellation and a reopening leave before any approval, and the first cancellation time through later saves', async () => {
    const [projectId, taskId] = [await newProject(), newTaskId()];
    await apply(taskId, projectId, [{ type: 'TaskReopened', version: 1, taskId, projectId, attempt: 3, payload: { reason: 'QA_REJECTED', previousAttempt: 2, previousAnnotatorId: null } }]);
    expect(await withTransaction(pool, (tx) => loadBillingTask(tx, taskId, projectId))).toMatchObject({ cancelled: false, latestAttempt: 3, billings: [] });
    await apply(taskId, projectId, [{ type: 'TaskCancelled', version: 1, taskId, projectId, attempt: 3, payload: { reason: 'no longer needed', cancelledBy: 'manager-1', previousStatus: 'open' } }]);
    const cancelledAt = async () => (await pool.query<{ cancelled_at: Date }>('SELECT cancelled_at FROM billing_tasks WHERE task_id = $1', [taskId])).rows[0]?.cancelled_at;
    const first = await cancelledAt();
    expect(first).toBeInstanceOf(Date);
    await apply(taskId, projectId, [{ type: 'TaskReopened', version: 1, taskId, projectId, attempt: 4, payload: { reason: 'LEASE_EXPIRED', previousAttempt: 3, previousAnnotatorId: null } }]);
    expect(await cancelledAt()).toEqual(first);
    expect(await withTransaction(pool, (tx) => loadBillingTask(tx, taskId, projectId))).toMatchObject({ cancelled: true, latestAttempt: 4 });
  });

  it("locks a batch's tasks, projects and payouts up front and books each event inside it: a writer of the same project waits for the batch", async () => {
    const projectId = await newProject();
    const annotatorId = newAnnotator();
    const tasks = [newTaskId(), newTaskId()];
    const qaPassed = (taskId: TaskId) => qaPassedOf(taskId, projectId, annotatorId);
    const [opened, commit] = [latch(), latch()];
    const batch = withTransaction(pool, async (tx) => {
      const states = await billingBatchStore.open(tx, tasks.map(qaPassed));
      opened.open();
      for (const taskId of tasks) {
        const before = await states.get(taskId);
        // The approved annotator's payout row was made and locked up front; the second task sees the first one's credit.
        expect(before.payouts).toEqual({ [annotatorId]: taskId === tasks[0] ? 0 : price });
        await states.set(taskId, before, evolve(before, completed(taskId, projectId, annotatorId)));
      }
      await states.save();
      await commit.opened;
    });
    await opened.opened;
    const otherTask = newTaskId();
    const writer = apply(otherTask, projectId, [completed(otherTask, projectId, annotatorId)], [annotatorId]);
    await someoneWaitsForALock();
    commit.open();
    await batch;
    await writer;
    expect(await loadProject(pool, projectId)).toMatchObject({ balance: 1_000 - 3 * price, version: 4 });
    expect(await payoutInEur(annotatorId)).toBe(3 * price);
    for (const taskId of tasks) expect(await ledgerOf(taskId)).toHaveLength(2);
  });

  it("books every transition of a batch in order and writes the balances once, as they ended: a completion and a refund of one task, beside another task's completion", async () => {
    const projectId = await newProject();
    const annotatorId = newAnnotator();
    const [kept, undone] = [newTaskId(), newTaskId()];
    const qaPassed = (taskId: TaskId) => qaPassedOf(taskId, projectId, annotatorId);
    const refunded: Draft = { type: 'BillingRefunded', version: 1, taskId: undone, projectId, attempt: 1, payload: { annotatorId, amount: price, reason: 'TASK_CANCELLED', refundedBy: 'manager-1' } };
    await withTransaction(pool, async (tx) => {
      const states = await billingBatchStore.open(tx, [qaPassed(undone), qaPassed(kept)]);
      // In offset order, as the shell applies them: each get sees what the set before it left.
      const steps: [TaskId, Draft][] = [[undone, completed(undone, projectId, annotatorId)], [kept, completed(kept, projectId, annotatorId)], [undone, refunded]];
      for (const [taskId, draft] of steps) {
        const before = await states.get(taskId);
        await states.set(taskId, before, evolve(before, draft));
      }
      const last = await states.get(undone);
      expect(last.project?.balance).toBe(1_000 - price);
      expect(last.payouts).toEqual({ [annotatorId]: price });
      await states.save();
    });
    expect(await loadProject(pool, projectId)).toMatchObject({ balance: 1_000 - price, version: 4 });
    expect(await payoutInEur(annotatorId)).toBe(price);
    expect(await ledgerOf(kept)).toEqual([['debit', null, price, reviewer], ['credit', annotatorId, price, reviewer]]);
    expect(await ledgerOf(undone)).toEqual([['debit', null, price, reviewer], ['credit', annotatorId, price, reviewer], ['refund', null, price, 'manager-1'], ['reversal', annotatorId, price, 'manager-1']]);
    expect((await listBillings(pool, undone)).map((b) => b.status)).toEqual(['refunded']);
    expect((await listBillings(pool, kept)).map((b) => b.status)).toEqual(['completed']);
  });

  it('refuses a batch whose billing another writer changed after the batch read it, with a retriable CONCURRENT_UPDATE', async () => {
    const [projectId, taskId, annotatorId] = [await newProject(), newTaskId(), newAnnotator()];
    await apply(taskId, projectId, [completed(taskId, projectId, annotatorId)], [annotatorId]);
    const refund: Draft = { type: 'BillingRefunded', version: 1, taskId, projectId, attempt: 1, payload: { annotatorId, amount: price, reason: 'TASK_CANCELLED', refundedBy: 'manager-1' } };
    const attempt = withTransaction(pool, async (tx) => {
      const states = await billingBatchStore.open(tx, [{ id: freshSnowflake() as EventId, type: 'TaskCancelled', version: 1, taskId, projectId, attempt: 1, occurredAt: new Date().toISOString(), producer: 'task-svc', payload: { reason: 'gone', cancelledBy: 'manager-1', previousStatus: 'labelled' } } as DomainEvent]);
      const before = await states.get(taskId);
      await states.set(taskId, before, evolve(before, refund));
      // Behind the batch's back (nothing in the services does this: every writer locks the task first).
      await tx.query("UPDATE billings SET status = 'failed' WHERE task_id = $1", [taskId]);
      await states.save();
    });
    await expect(attempt).rejects.toMatchObject({ code: ServiceKitErrors.CONCURRENT_UPDATE, retriable: true });
    expect(await ledgerOf(taskId)).toHaveLength(2);
    expect(await payoutInEur(annotatorId)).toBe(price);
  });

  it('keeps one payout per currency: credits from a EUR and a USD project, one batch and one task at a time, never add up', async () => {
    const annotatorId = newAnnotator();
    const [eur, usd] = [await newProject(1_000, 'EUR'), await newProject(1_000, 'USD')];
    const [inEur, inUsd, single] = [newTaskId(), newTaskId(), newTaskId()];
    await withTransaction(pool, async (tx) => {
      const states = await billingBatchStore.open(tx, [qaPassedOf(inEur, eur, annotatorId), qaPassedOf(inUsd, usd, annotatorId)]);
      for (const [taskId, projectId] of [[inEur, eur], [inUsd, usd]] as const) {
        const before = await states.get(taskId);
        // Each task sees the payout in its own project's currency only.
        expect(before.payouts).toEqual({ [annotatorId]: 0 });
        await states.set(taskId, before, evolve(before, completed(taskId, projectId, annotatorId)));
      }
      await states.save();
    });
    expect(await loadPayoutBalances(pool, annotatorId)).toEqual({ EUR: price, USD: price });

    const after = await apply(single, usd, [completed(single, usd, annotatorId)], [annotatorId]);
    expect(after.payouts).toEqual({ [annotatorId]: 2 * price });
    expect(await loadPayoutBalances(pool, annotatorId)).toEqual({ EUR: price, USD: 2 * price });
  });

  it("books one annotator's credits in every currency one at a time, so her ledger ids follow the order they commit in", async () => {
    const annotatorId = newAnnotator();
    const [eur, usd] = [await newProject(1_000, 'EUR'), await newProject(1_000, 'USD')];
    const [inEur, inUsd] = [newTaskId(), newTaskId()];
    await apply(inUsd, usd, [], [annotatorId]);
    const [eurBooked, commit] = [latch(), latch()];
    // A EUR credit booked and not committed yet: its ledger entry holds the smaller id.
    const first = withTransaction(pool, async (tx) => {
      const before = await loadBillingTask(tx, inEur, eur, { annotators: [annotatorId] });
      await saveBillingTask(tx, before, evolve(before, completed(inEur, eur, annotatorId)));
      eurBooked.open();
      await commit.opened;
    });
    await eurBooked.opened;
    // A USD credit of hers waits for it, rather than commit a larger id first.
    const second = apply(inUsd, usd, [completed(inUsd, usd, annotatorId)], [annotatorId]);
    await someoneWaitsForALock();
    commit.open();
    await Promise.all([first, second]);
    const credits = (await listLedger(pool, { annotatorId, kind: 'credit' })).map((e) => e.taskId);
    expect(credits).toEqual([inEur, inUsd]);
    expect(await loadPayoutBalances(pool, annotatorId)).toEqual({ EUR: price, USD: price });
  });
});

