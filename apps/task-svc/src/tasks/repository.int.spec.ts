import { randomUUID } from 'node:crypto';
import type pg from 'pg';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { decodeCursor, encodeCursor, migrate } from '@labelflow/service-kit';
import { createTestDatabase, createTestPool, uniqueName } from '@labelflow/testing';
import { migrations } from '../migrations';
import { listTasks, TaskListPosition, type TaskListFilter } from './repository';

const infra = inject('infra');

const projectA = randomUUID();
const projectB = randomUUID();
const projectC = randomUUID();
const nobodysProject = randomUUID();

/**
 * Timestamps chosen so that rounding breaks paging: several one microsecond apart within one
 * millisecond, and many tasks sharing each (as tasks created in one transaction share now()).
 */
const instants = ['2024-03-01T12:00:00.123456Z', '2024-03-01T12:00:00.123457Z', '2024-03-01T12:00:00.123999Z', '2024-03-01T12:00:00.124000Z', '2024-03-02T08:30:00.000001Z'];
const statuses = ['open', 'assigned', 'completed'];

interface Seeded {
  readonly taskId: string;
  readonly projectId: string;
  readonly status: string;
}

describe('task-svc listTasks keyset pages', () => {
  let pool: pg.Pool;
  let drop: () => Promise<void>;
  const seeded: Seeded[] = [];

  beforeAll(async () => {
    const db = await createTestDatabase(infra.pgUrl, uniqueName('tasklist'));
    drop = db.drop;
    pool = createTestPool(db.url);
    await migrate(pool, migrations);
    let n = 0;
    for (const [i, at] of instants.entries()) {
      for (const projectId of [projectA, projectB, projectC]) {
        // A different number of tasks per (instant, project), with ids of mixed lengths: text order is not numeric order.
        for (let k = 0; k < 3 + ((i * 7 + k) % 5) + (projectId === projectA ? 9 : 0); k++) {
          n += 1;
          seeded.push({ taskId: String(n % 3 === 0 ? n : 7_000_000 + n), projectId, status: statuses[n % statuses.length]! });
          await pool.query(
            `INSERT INTO tasks (task_id, project_id, title, data_uri, status, attempt, version, created_at) VALUES ($1, $2, 't', 's3://b/k', $3, 1, 1, $4::timestamptz)`,
            [seeded.at(-1)!.taskId, projectId, seeded.at(-1)!.status, at],
          );
        }
      }
    }
    await pool.query('ANALYZE tasks');
  });
  afterAll(async () => {
    await pool.end();
    await drop();
  });

  /** The order one unpaged query gives: what the pages, concatenated, must equal. */
  const expectedIds = async (where: string, values: unknown[]) =>
    (await pool.query<{ task_id: string }>(`SELECT task_id FROM tasks WHERE ${where} ORDER BY created_at, task_id`, values)).rows.map((r) => r.task_id);

  /** Walks every page as a client would, through encoded cursors, and checks each page's size. */
  const walk = async (filter: Omit<TaskListFilter, 'after'>) => {
    const ids: string[] = [];
    let cursor: string | null = null;
    for (let pages = 1; pages < 10_000; pages++) {
      const after: TaskListPosition | undefined = cursor === null ? undefined : decodeCursor(TaskListPosition, cursor);
      const { items, next } = await listTasks(pool, { ...filter, after });
      ids.push(...items.map((t) => t.taskId));
      if (next === null) {
        expect(items.length).toBeLessThanOrEqual(filter.limit);
        return { ids, pages };
      }
      expect(items).toHaveLength(filter.limit);
      cursor = encodeCursor(next);
    }
    throw new Error('paging did not end');
  };

  it('covers every task exactly once, in order, whatever the page size, when many tasks share a microsecond', async () => {
    const all = await expectedIds('true', []);
    expect(all).toHaveLength(seeded.length);
    for (const limit of [1, 2, 3, 5, 7, 16, seeded.length - 1, seeded.length, 1000]) {
      const { ids } = await walk({ projectIds: 'all', limit });
      expect(ids).toEqual(all);
    }
  });

  it('carries created_at to the microsecond in the next position', async () => {
    const first = await listTasks(pool, { projectIds: 'all', limit: 1 });
    expect(first.next?.createdAt).toBe('2024-03-01T12:00:00.123456Z');
    const firstInstant = seeded.filter((t, i) => t.projectId === projectA && i < seeded.findIndex((u) => u.projectId === projectB)).length;
    const upToFirstInstant = await listTasks(pool, { projectIds: [projectA], limit: firstInstant });
    expect(upToFirstInstant.next?.createdAt).toBe('2024-03-01T12:00:00.123456Z');
    const sameMillisecond = await listTasks(pool, { projectIds: [projectA], limit: 1, after: upToFirstInstant.next! });
    expect(sameMillisecond.items[0]?.createdAt.toISOString()).toBe('2024-03-01T12:00:00.123Z');
    expect(sameMillisecond.next?.createdAt).toBe('2024-03-01T12:00:00.123457Z');
  });

  it('returns only the listed projects, merged in one order, and a project listed twice only once', async () => {
    const expected = await expectedIds('project_id = ANY($1::uuid[])', [[projectA, projectC]]);
    expect(expected.length).toBe(seeded.filter((t) => t.projectId !== projectB).length);
    for (const limit of [1, 4, 25]) {
      const { ids } = await walk({ projectIds: [projectC, projectA, projectA.toUpperCase()], limit });
      expect(ids).toEqual(expected);
    }
    const { ids } = await walk({ projectIds: [projectB], limit: 6 });
    expect(ids).toEqual(await expectedIds('project_id = $1', [projectB]));
  });

  it('filters by one status or by several, with and without a project filter', async () => {
    expect((await walk({ projectIds: 'all', status: 'open', limit: 4 })).ids).toEqual(await expectedIds(`status = 'open'`, []));
    expect((await walk({ projectIds: 'all', status: ['open', 'completed'], limit: 4 })).ids).toEqual(await expectedIds(`status IN ('open', 'completed')`, []));
    expect((await walk({ projectIds: [projectA, projectB], status: ['assigned', 'open'], limit: 3 })).ids).toEqual(
      await expectedIds(`status IN ('assigned', 'open') AND project_id IN ($1, $2)`, [projectA, projectB]),
    );
    const { items } = await listTasks(pool, { projectIds: [projectA], status: 'completed', limit: 1000 });
    expect(items.length).toBeGreaterThan(0);
    expect(items.every((t) => t.status === 'completed' && t.projectId === projectA)).toBe(true);
  });

  it('answers an empty page with no next position', async () => {
    expect(await listTasks(pool, { projectIds: [nobodysProject], limit: 10 })).toEqual({ items: [], next: null });
    expect(await listTasks(pool, { projectIds: [], limit: 10 })).toEqual({ items: [], next: null });
    expect(await listTasks(pool, { projectIds: 'all', status: [], limit: 10 })).toEqual({ items: [], next: null });
    expect(await listTasks(pool, { projectIds: 'all', status: 'no-such-status', limit: 10 })).toEqual({ items: [], next: null });
    expect(await listTasks(pool, { projectIds: 'all', limit: 10, after: { createdAt: '2999-01-01T00:00:00.000000Z', taskId: '' } })).toEqual({ items: [], next: null });
  });

  it('ends on the last full page with next null, never on an extra empty page', async () => {
    const total = (await expectedIds('project_id = $1', [projectB])).length;
    const limit = [5, 4, 3, 2].find((l) => total % l === 0) ?? 1;
    const { ids, pages } = await walk({ projectIds: [projectB], limit });
    expect(ids).toHaveLength(total);
    expect(pages).toBe(total / limit);
  });
});
