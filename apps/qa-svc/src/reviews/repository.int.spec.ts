import { randomUUID } from 'node:crypto';
import type pg from 'pg';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { decodeCursor, encodeCursor, migrate } from '@labelflow/service-kit';
import { createTestDatabase, createTestPool, uniqueName } from '@labelflow/testing';
import { migrations } from '../migrations';
import { listReviewRows, pageReviewRows, ReviewListPosition, type ReviewListFilter } from './repository';

const infra = inject('infra');

const projectA = randomUUID();
const projectB = randomUUID();
const projectC = randomUUID();
const nobodysProject = randomUUID();

/** Several openings one microsecond apart in one millisecond, each shared by many reviews (one transaction's now()). */
const instants = ['2024-03-01T12:00:00.500000Z', '2024-03-01T12:00:00.500001Z', '2024-03-01T12:00:00.500999Z', '2024-03-04T00:00:00.000001Z'];
const statuses = ['pending', 'passed', 'rejected'];
/** The key of a review as the pages are compared: task and attempt. */
const key = (r: { task_id: string; attempt: number }) => `${r.task_id}#${r.attempt}`;

describe('qa-svc review list keyset pages', () => {
  let pool: pg.Pool;
  let drop: () => Promise<void>;
  let seeded = 0;
  /** A task with three attempts all opened in the same microsecond: only the attempt orders them. */
  const historyTask = '900000000000000001';

  beforeAll(async () => {
    const db = await createTestDatabase(infra.pgUrl, uniqueName('reviewlist'));
    drop = db.drop;
    pool = createTestPool(db.url);
    await migrate(pool, migrations);
    let n = 0;
    const insert = async (taskId: string, attempt: number, projectId: string, status: string, at: string) => {
      seeded += 1;
      await pool.query(
        `INSERT INTO reviews (task_id, attempt, project_id, annotator_id, status, opened_at) VALUES ($1, $2, $3, 'ann-1', $4, $5::timestamptz)`,
        [taskId, attempt, projectId, status, at],
      );
    };
    for (const [i, at] of instants.entries()) {
      for (const projectId of [projectA, projectB, projectC]) {
        for (let k = 0; k < 2 + ((i * 5 + k) % 4) + (projectId === projectB ? 6 : 0); k++) {
          n += 1;
          // Some tasks have several attempts opened together, so (opened_at, task_id) ties too.
          for (let attempt = 1; attempt <= 1 + (n % 3); attempt++) await insert(String(n % 2 === 0 ? n : 100_000 + n), attempt, projectId, statuses[(n + attempt) % 3]!, at);
        }
      }
    }
    for (const attempt of [3, 1, 2]) await insert(historyTask, attempt, projectA, attempt === 3 ? 'pending' : 'rejected', instants[1]!);
    await pool.query('ANALYZE reviews');
  });
  afterAll(async () => {
    await pool.end();
    await drop();
  });

  const expectedKeys = async (where: string, values: unknown[]) =>
    (await pool.query<{ task_id: string; attempt: number }>(`SELECT task_id, attempt FROM reviews WHERE ${where} ORDER BY opened_at, task_id, attempt`, values)).rows.map(key);

  /** Walks every page as a client would, through encoded cursors, and checks each page's size. */
  const walk = async (filter: Omit<ReviewListFilter, 'after'>) => {
    const keys: string[] = [];
    let cursor: string | null = null;
    for (let pages = 1; pages < 10_000; pages++) {
      const after = cursor === null ? undefined : decodeCursor(ReviewListPosition, cursor);
      const { items, next } = await pageReviewRows(pool, { ...filter, after });
      keys.push(...items.map(key));
      if (next === null) return { keys, pages };
      expect(items).toHaveLength(filter.limit);
      cursor = encodeCursor(next);
    }
    throw new Error('paging did not end');
  };

  it('covers every review exactly once, in order, whatever the page size, when many share an opening microsecond', async () => {
    const all = await expectedKeys('true', []);
    expect(all).toHaveLength(seeded);
    for (const limit of [1, 2, 3, 5, 8, 13, seeded - 1, seeded, 1000]) expect((await walk({ projectIds: 'all', limit })).keys).toEqual(all);
  });

  it('carries opened_at to the microsecond and the attempt in the next position', async () => {
    const { next } = await pageReviewRows(pool, { projectIds: 'all', taskId: historyTask, limit: 2 });
    expect(next).toEqual({ openedAt: '2024-03-01T12:00:00.500001Z', taskId: historyTask, attempt: 2 });
  });

  it('still gives a task its whole history in attempt order through listReviewRows', async () => {
    const rows = await listReviewRows(pool, { taskId: historyTask, limit: 1000 });
    expect(rows.map((r) => [r.attempt, r.status])).toEqual([
      [1, 'rejected'],
      [2, 'rejected'],
      [3, 'pending'],
    ]);
    expect(rows[0]?.opened_at).toBeInstanceOf(Date);
  });

  it('returns only the listed projects, merged in one order, and a project listed twice only once', async () => {
    const expected = await expectedKeys('project_id = ANY($1::uuid[])', [[projectA, projectC]]);
    for (const limit of [1, 4, 25]) expect((await walk({ projectIds: [projectC, projectA, projectC], limit })).keys).toEqual(expected);
    expect((await walk({ projectIds: [projectB], limit: 6 })).keys).toEqual(await expectedKeys('project_id = $1', [projectB]));
    expect(await listReviewRows(pool, { taskId: historyTask, projectIds: [projectB], limit: 1000 })).toEqual([]);
  });

  it('filters by one status or by several, with and without a project filter', async () => {
    expect((await walk({ projectIds: 'all', status: 'pending', limit: 4 })).keys).toEqual(await expectedKeys(`status = 'pending'`, []));
    expect((await walk({ projectIds: 'all', status: ['passed', 'rejected'], limit: 5 })).keys).toEqual(await expectedKeys(`status IN ('passed', 'rejected')`, []));
    expect((await walk({ projectIds: [projectB, projectA], status: ['pending', 'passed'], limit: 3 })).keys).toEqual(
      await expectedKeys(`status IN ('pending', 'passed') AND project_id IN ($1, $2)`, [projectA, projectB]),
    );
    const passed = await listReviewRows(pool, { projectIds: [projectC], status: 'passed', limit: 1000 });
    expect(passed.length).toBeGreaterThan(0);
    expect(passed.every((r) => r.status === 'passed' && r.project_id === projectC)).toBe(true);
  });

  it('answers an empty page with no next position', async () => {
    expect(await pageReviewRows(pool, { projectIds: [nobodysProject], limit: 10 })).toEqual({ items: [], next: null });
    expect(await pageReviewRows(pool, { projectIds: [], limit: 10 })).toEqual({ items: [], next: null });
    expect(await pageReviewRows(pool, { projectIds: 'all', status: [], limit: 10 })).toEqual({ items: [], next: null });
    expect(await pageReviewRows(pool, { projectIds: 'all', limit: 10, after: { openedAt: '2999-01-01T00:00:00.000000Z', taskId: '1', attempt: 1 } })).toEqual({
      items: [],
      next: null,
    });
  });

  it('ends on the last full page with next null, never on an extra empty page', async () => {
    const total = (await expectedKeys('project_id = $1', [projectA])).length;
    const limit = [5, 4, 3, 2].find((l) => total % l === 0) ?? 1;
    const { keys, pages } = await walk({ projectIds: [projectA], limit });
    expect(keys).toHaveLength(total);
    expect(pages).toBe(total / limit);
  });
});
