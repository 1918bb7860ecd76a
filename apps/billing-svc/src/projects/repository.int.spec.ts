import { randomUUID } from 'node:crypto';
import type pg from 'pg';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import type { AnnotatorId, ProjectId, TaskId } from '@labelflow/contracts';
import { decodeCursor, encodeCursor, migrate, ServiceKitErrors, withTransaction } from '@labelflow/service-kit';
import { createTestDatabase, createTestPool, eventually, latch, uniqueName, freshDatabase } from '@labelflow/testing';
import { migrations } from '../migrations';
import { appendLedger, insertProject, LedgerListPosition, listLedger, loadProject, loadProjectsForUpdate, loadProjectSummary, pageLedger, saveBalance, saveBalances, type LedgerEntry, type LedgerPageFilter } from './repository';

const infra = inject('infra');

const projectA = randomUUID() as ProjectId;
const projectB = randomUUID() as ProjectId;
const projectC = randomUUID() as ProjectId;
const annotator = 'ann-paged' as AnnotatorId;
const otherAnnotator = 'ann-other' as AnnotatorId;

describe('billing-svc pageLedger keyset pages', () => {
  let pool: pg.Pool;
  let drop: () => Promise<void>;

  beforeAll(async () => {
    const db = await createTestDatabase(infra.pgUrl, uniqueName('ledgerpage'));
    drop = db.drop;
    pool = createTestPool(db.url);
    await migrate(pool, migrations);
    for (const projectId of [projectA, projectB, projectC]) await insertProject(pool, { projectId, name: 'p', currency: 'EUR', pricePerTask: 100, machinePricePerTask: 0, balance: 0 });
    // Interleaved as billing books them: the project's debit, then the annotator's credit, sometimes a reversal.
    const entries: LedgerEntry[] = [];
    for (let n = 1; n <= 60; n++) {
      const projectId = [projectA, projectB, projectC][n % 3]!;
      const taskId = String(500_000 + n) as TaskId;
      const annotatorId = n % 4 === 0 ? otherAnnotator : annotator;
      entries.push({ projectId, kind: 'debit', amount: 100, taskId, attempt: 1, annotatorId: null, actor: 'reviewer-1' });
      entries.push({ projectId, kind: 'credit', amount: 100, taskId, attempt: 1, annotatorId, actor: 'reviewer-1' });
      if (n % 5 === 0) entries.push({ projectId, kind: 'reversal', amount: 100, taskId, attempt: 1, annotatorId, actor: null });
    }
    await appendLedger(pool, entries);
    await pool.query('ANALYZE ledger');
  });
  afterAll(async () => {
    await pool.end();
    await drop();
  });

  const expectedIds = async (where: string, values: unknown[]) =>
    (await pool.query<{ id: string }>(`SELECT id FROM ledger WHERE annotator_id = $1 AND ${where} ORDER BY id`, [annotator, ...values])).rows.map((r) => r.id);

  /** Walks every page as a client would, through encoded cursors, and checks each page's size. */
  const walk = async (filter: Omit<LedgerPageFilter, 'afterId'>) => {
    const ids: string[] = [];
    let cursor: string | null = null;
    for (let pages = 1; pages < 10_000; pages++) {
      const afterId = cursor === null ? undefined : decodeCursor(LedgerListPosition, cursor).afterId;
      const { items, next } = await pageLedger(pool, { ...filter, afterId });
      ids.push(...items.map((e) => e.id));
      if (next === null) return { ids, pages };
      expect(items).toHaveLength(filter.limit);
      cursor = encodeCursor(next);
    }
    throw new Error('paging did not end');
  };

  it('covers every entry of the annotator exactly once, in id order, whatever the page size', async () => {
    const all = await expectedIds('true', []);
    expect(all.length).toBeGreaterThan(40);
    for (const limit of [1, 2, 7, 16, all.length - 1, all.length, 1000]) expect((await walk({ annotatorId: annotator, limit })).ids).toEqual(all);
  });

  it('filters by kind, leaving out reversals, debits and other annotators', async () => {
    const { ids } = await walk({ annotatorId: annotator, kind: 'credit', limit: 6 });
    expect(ids).toEqual(await expectedIds(`kind = 'credit'`, []));
    const { items } = await pageLedger(pool, { annotatorId: annotator, kind: 'reversal', limit: 1000 });
    expect(items.length).toBeGreaterThan(0);
    expect(items.every((e) => e.kind === 'reversal' && e.annotatorId === annotator)).toBe(true);
  });

  it("returns only the listed projects' entries", async () => {
    const { ids } = await walk({ annotatorId: annotator, kind: 'credit', projectIds: [projectC, projectA, projectA], limit: 5 });
    expect(ids).toEqual(await expectedIds(`kind = 'credit' AND project_id IN ($2, $3)`, [projectA, projectC]));
    const { items } = await pageLedger(pool, { annotatorId: annotator, projectIds: [projectB], limit: 1000 });
    expect(items.length).toBeGreaterThan(0);
    expect(items.every((e) => e.projectId === projectB)).toBe(true);
  });

  it('accepts the position as a number as well as a string', async () => {
    const first = await pageLedger(pool, { annotatorId: annotator, limit: 3 });
    const [byString, byNumber] = await Promise.all([
      pageLedger(pool, { annotatorId: annotator, limit: 3, afterId: first.next!.afterId }),
      pageLedger(pool, { annotatorId: annotator, limit: 3, afterId: Number(first.next!.afterId) }),
    ]);
    expect(byNumber).toEqual(byString);
    expect(BigInt(byString.items[0]!.id)).toBeGreaterThan(BigInt(first.items[2]!.id));
  });

  it('answers an empty page with no next position', async () => {
    expect(await pageLedger(pool, { annotatorId: 'nobody', limit: 10 })).toEqual({ items: [], next: null });
    expect(await pageLedger(pool, { annotatorId: annotator, projectIds: [], limit: 10 })).toEqual({ items: [], next: null });
    expect(await pageLedger(pool, { annotatorId: annotator, limit: 10, afterId: '9223372036854775807' })).toEqual({ items: [], next: null });
  });

  it('ends on the last full page with next null, never on an extra empty page', async () => {
    const total = (await expectedIds(`kind = 'credit'`, [])).length;
    const limit = [5, 4, 3, 2].find((l) => total % l === 0) ?? 1;
    const { ids, pages } = await walk({ annotatorId: annotator, kind: 'credit', limit });
    expect(ids).toHaveLength(total);
    expect(pages).toBe(total / limit);
  });

  it('keeps listLedger answering every matching entry for its existing callers', async () => {
    const credits = await listLedger(pool, { annotatorId: annotator, kind: 'credit' });
    expect(credits.map((e) => e.id)).toEqual(await expectedIds(`kind = 'credit'`, []));
  });
});


describe('billing-svc project repository', () => {
  let pool: pg.Pool;
  const db = freshDatabase(infra.pgUrl, 'projectrepo', (p) => migrate(p, migrations));
  beforeAll(async () => void (pool = await db.open()));
  afterAll(() => db.close());

  const newProject = async (balance = 1_000) => {
    const projectId = randomUUID() as ProjectId;
    await insertProject(pool, { projectId, name: 'cats', currency: 'EUR', pricePerTask: 100, machinePricePerTask: 0, balance });
    return projectId;
  };
  /** Resolves once a session of this test's database waits for a lock another transaction holds. */
  const someoneWaitsForALock = () =>
    eventually(async () => {
      const { rows } = await pool.query<{ n: number }>("SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'");
      expect(rows[0]?.n).toBe(1);
    });

  it('loads a project as inserted, at version 1, and null for a project it does not have', async () => {
    const projectId = await newProject(2_500);
    expect(await loadProject(pool, projectId)).toMatchObject({ projectId, name: 'cats', currency: 'EUR', pricePerTask: 100, balance: 2_500, version: 1 });
    expect(await loadProject(pool, randomUUID() as ProjectId)).toBeNull();
  });

  it('saves a balance by compare-and-set on the version, refusing a stale one with a retriable CONCURRENT_UPDATE', async () => {
    const projectId = await newProject();
    await saveBalance(pool, projectId, 900, 1);
    expect(await loadProject(pool, projectId)).toMatchObject({ balance: 900, version: 2 });
    await expect(saveBalance(pool, projectId, 1_500, 1)).rejects.toMatchObject({ code: ServiceKitErrors.CONCURRENT_UPDATE, retriable: true });
    expect(await loadProject(pool, projectId)).toMatchObject({ balance: 900, version: 2 });
  });

  it('keeps saving a busy project\'s balance past 2^31 versions, one at a time and several in one statement', async () => {
    const projectId = await newProject();
    const near = 2 ** 31 - 2;
    await pool.query('UPDATE projects SET version = $2 WHERE project_id = $1', [projectId, near]);
    await saveBalance(pool, projectId, 900, near);
    await saveBalance(pool, projectId, 800, near + 1);
    const [loaded] = await loadProjectsForUpdate(pool, [projectId]);
    expect(loaded).toMatchObject({ balance: 800, version: 2 ** 31 });
    await saveBalances(pool, [{ projectId, balance: 700, loadedVersion: 2 ** 31, changes: 3 }]);
    expect(await loadProject(pool, projectId)).toMatchObject({ balance: 700, version: 2 ** 31 + 3 });
  });

  it("applies balance changes of one project one at a time: a second locking load waits for the first's commit and sees its balance", async () => {
    const projectId = await newProject();
    const [firstSaved, commit] = [latch(), latch()];
    const first = withTransaction(pool, async (tx) => {
      const project = (await loadProject(tx, projectId, { forUpdate: true }))!;
      await saveBalance(tx, projectId, project.balance - 100, project.version);
      firstSaved.open();
      await commit.opened;
    });
    await firstSaved.opened;
    const second = withTransaction(pool, (tx) => loadProject(tx, projectId, { forUpdate: true }));
    await someoneWaitsForALock();
    commit.open();
    await first;
    expect(await second).toMatchObject({ balance: 900, version: 2 });
  });

  it('sums the top-ups, debits and refunds of a project in its summary', async () => {
    const projectId = await newProject(0);
    const taskId = '700000000000000001' as TaskId;
    const annotatorId = 'ann-summary' as AnnotatorId;
    await appendLedger(pool, [
      { projectId, kind: 'topup', amount: 1_000, taskId: null, attempt: null, annotatorId: null, actor: 'owner-1' },
      { projectId, kind: 'topup', amount: 500, taskId: null, attempt: null, annotatorId: null, actor: 'owner-1' },
      { projectId, kind: 'debit', amount: 100, taskId, attempt: 1, annotatorId: null, actor: 'rev-1' },
      { projectId, kind: 'credit', amount: 100, taskId, attempt: 1, annotatorId, actor: 'rev-1' },
      { projectId, kind: 'refund', amount: 100, taskId, attempt: 1, annotatorId: null, actor: null },
    ]);
    expect(await loadProjectSummary(pool, projectId)).toMatchObject({ totalToppedUp: 1_500, totalDebited: 100, totalRefunded: 100 });
    expect(await loadProjectSummary(pool, await newProject())).toMatchObject({ totalToppedUp: 0, totalDebited: 0, totalRefunded: 0 });
    expect(await loadProjectSummary(pool, randomUUID() as ProjectId)).toBeNull();
  });

  it('books at most one entry of each kind per task attempt, whatever the code above does', async () => {
    const projectId = await newProject();
    const entry: LedgerEntry = { projectId, kind: 'debit', amount: 100, taskId: '700000000000000002' as TaskId, attempt: 1, annotatorId: null, actor: 'rev-1' };
    await appendLedger(pool, [entry]);
    await expect(appendLedger(pool, [entry])).rejects.toMatchObject({ code: '23505' });
    await appendLedger(pool, [{ ...entry, attempt: 2 }]);
    expect(await listLedger(pool, { taskId: entry.taskId! })).toHaveLength(2);
  });
});
