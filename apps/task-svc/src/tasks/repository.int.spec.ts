import { randomUUID } from 'node:crypto';
import type pg from 'pg';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import type { AnnotatorId, ProjectId, TaskId } from '@labelflow/contracts';
import { createPool, decodeCursor, encodeCursor, migrate, ServiceKitErrors, withTransaction } from '@labelflow/service-kit';
import { createTestDatabase, createTestPool, eventually, freshSnowflake, latch, seqScansOf, uniqueName, freshDatabase } from '@labelflow/testing';
import { migrations } from '../migrations';
import { claimExpiredLeases, listTasks, loadTask, loadTasksForUpdate, saveTask, saveTasks, TaskListPosition, type TaskListFilter } from './repository';
import type { TaskState } from './state';

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


describe('task-svc task repository', () => {
  let pool: pg.Pool;
  const db = freshDatabase(infra.pgUrl, 'taskrepo', (p) => migrate(p, migrations));
  beforeAll(async () => void (pool = await db.open()));
  afterAll(() => db.close());

  let numbered = 0;
  const newTask = (over: Partial<TaskState> = {}): TaskState => ({
    taskId: freshSnowflake() as TaskId,
    projectId: randomUUID() as ProjectId,
    title: 'Label the cats',
    dataUri: 's3://bucket/cats/1.jpg',
    taskNumber: `CAT-${++numbered}`,
    status: 'open',
    attempt: 1,
    assignee: null,
    leaseExpiresAt: null,
    reason: null,
    rejectedBy: [],
    labelledBy: [],
    version: 1,
    ...over,
  });
  const created = async (over: Partial<TaskState> = {}) => {
    const task = newTask(over);
    await saveTask(pool, task, null);
    return task;
  };
  /** Resolves once a session of this test's database waits for a row lock another transaction holds. */
  const someoneWaitsForALock = () =>
    eventually(async () => {
      const { rows } = await pool.query<{ n: number }>("SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'");
      expect(rows[0]?.n).toBe(1);
    });

  it('loads a saved task as it was saved, at version 1, and a compare-and-set save bumps the version', async () => {
    const task = await created();
    expect(await loadTask(pool, task.taskId)).toMatchObject(task);
    // A lease given with an offset is stored as an instant and read back in UTC.
    const assigned = { ...task, status: 'assigned' as const, attempt: 2, assignee: 'ann-1' as AnnotatorId, leaseExpiresAt: '2030-01-01T02:00:00.000+02:00' };
    await saveTask(pool, assigned, 1);
    const loaded = await loadTask(pool, task.taskId);
    expect(loaded).toMatchObject({ ...assigned, leaseExpiresAt: '2030-01-01T00:00:00.000Z', version: 2 });
    expect(loaded!.updatedAt.getTime()).toBeGreaterThanOrEqual(loaded!.createdAt.getTime());
    expect(await loadTask(pool, freshSnowflake() as TaskId)).toBeNull();
  });

  it('keeps the reviewers who rejected attempts through a single save and a batch save, in order', async () => {
    const task = await created({ rejectedBy: ['rev-1'] });
    expect((await loadTask(pool, task.taskId))?.rejectedBy).toEqual(['rev-1']);
    const reopened = { ...task, attempt: 2, rejectedBy: ['rev-1', 'rev.2@example.org'] };
    await withTransaction(pool, (tx) => saveTasks(tx, [{ before: task, after: reopened }]));
    expect(await loadTask(pool, task.taskId)).toMatchObject({ attempt: 2, rejectedBy: ['rev-1', 'rev.2@example.org'], version: 2 });
    await saveTask(pool, { ...reopened, rejectedBy: [] }, 2);
    expect((await loadTask(pool, task.taskId))?.rejectedBy).toEqual([]);
  });

  it('keeps who did the labelled attempts through a single save and a batch save, in order, with rejected_by beside it', async () => {
    const task = await created();
    expect((await loadTask(pool, task.taskId))?.labelledBy).toEqual([]);
    const labelled = { ...task, status: 'labelled' as const, labelledBy: ['ann-1'], rejectedBy: ['rev-1'] };
    await withTransaction(pool, (tx) => saveTasks(tx, [{ before: task, after: labelled }]));
    expect(await loadTask(pool, task.taskId)).toMatchObject({ labelledBy: ['ann-1'], rejectedBy: ['rev-1'], version: 2 });
    await saveTask(pool, { ...labelled, labelledBy: ['ann-1', 'ann.2@example.org', ''] }, 2);
    expect((await loadTask(pool, task.taskId))?.labelledBy).toEqual(['ann-1', 'ann.2@example.org', '']);
    const createdLabelled = await created({ labelledBy: ['ann-3'] });
    expect((await loadTask(pool, createdLabelled.taskId))?.labelledBy).toEqual(['ann-3']);
  });

  it('refuses a save from a version that is no longer current with a retriable CONCURRENT_UPDATE, writing nothing', async () => {
    const task = await created();
    await saveTask(pool, { ...task, status: 'assigned', assignee: 'ann-1' as AnnotatorId }, 1);
    await expect(saveTask(pool, { ...task, status: 'cancelled', reason: 'too late' }, 1)).rejects.toMatchObject({ code: ServiceKitErrors.CONCURRENT_UPDATE, retriable: true });
    expect(await loadTask(pool, task.taskId)).toMatchObject({ status: 'assigned', reason: null, version: 2 });
  });

  it('lets only one of two transactions that loaded the same version save: the other waits for its commit, then gets CONCURRENT_UPDATE', async () => {
    const task = await created();
    const [firstLoaded, secondLoaded, firstSaved, commit] = [latch(), latch(), latch(), latch()];
    const first = withTransaction(pool, async (tx) => {
      const seen = (await loadTask(tx, task.taskId))!;
      firstLoaded.open();
      await secondLoaded.opened;
      await saveTask(tx, { ...seen, status: 'assigned', assignee: 'ann-1' as AnnotatorId }, seen.version);
      firstSaved.open();
      await commit.opened;
    });
    const second = withTransaction(pool, async (tx) => {
      await firstLoaded.opened;
      const seen = (await loadTask(tx, task.taskId))!;
      secondLoaded.open();
      await firstSaved.opened;
      await saveTask(tx, { ...seen, status: 'cancelled', reason: 'cancelled by an admin' }, seen.version);
    });
    await someoneWaitsForALock();
    commit.open();
    const [won, lost] = await Promise.allSettled([first, second]);
    expect(won.status).toBe('fulfilled');
    expect(lost).toMatchObject({ status: 'rejected', reason: { code: ServiceKitErrors.CONCURRENT_UPDATE, retriable: true } });
    expect(await loadTask(pool, task.taskId)).toMatchObject({ status: 'assigned', assignee: 'ann-1', reason: null, version: 2 });
  });

  it("loads a batch's tasks with one query, null for a task it does not know, and locks them: a second batch waits and sees the first one's save", async () => {
    const [a, b] = [await created(), await created()];
    const unknown = freshSnowflake() as TaskId;
    const locked = latch();
    const commit = latch();
    const first = withTransaction(pool, async (tx) => {
      const batch = await loadTasksForUpdate(tx, [b.taskId, unknown, a.taskId]);
      expect(batch.get(unknown)).toBeNull();
      expect(batch.get(a.taskId)).toMatchObject(a);
      locked.open();
      await saveTasks(tx, [a, b].map((t) => ({ before: batch.get(t.taskId)!, after: { ...batch.get(t.taskId)!, status: 'labelled' as const } })));
      await commit.opened;
    });
    await locked.opened;
    const second = withTransaction(pool, (tx) => loadTasksForUpdate(tx, [a.taskId, b.taskId]));
    await someoneWaitsForALock();
    commit.open();
    await first;
    const seen = await second;
    expect(seen.get(a.taskId)).toMatchObject({ status: 'labelled', version: 2 });
    expect(seen.get(b.taskId)).toMatchObject({ status: 'labelled', version: 2 });
  });

  it("fails a batch's whole save with CONCURRENT_UPDATE when one of its tasks changed since the batch loaded it", async () => {
    const [a, b] = [await created(), await created()];
    await saveTask(pool, { ...b, status: 'cancelled', reason: 'cancelled meanwhile' }, 1);
    const save = withTransaction(pool, (tx) =>
      saveTasks(tx, [
        { before: a, after: { ...a, status: 'labelled' } },
        { before: b, after: { ...b, status: 'labelled' } },
      ]),
    );
    await expect(save).rejects.toMatchObject({ code: ServiceKitErrors.CONCURRENT_UPDATE, retriable: true, message: expect.stringContaining('1 of 2 tasks') });
    expect(await loadTask(pool, a.taskId)).toMatchObject({ status: 'open', version: 1 });
    expect(await loadTask(pool, b.taskId)).toMatchObject({ status: 'cancelled', version: 2 });
  });

  it('inserts a task new to the table when a batch saves it, and leaves a task whose state became null alone', async () => {
    const fresh = newTask({ status: 'labelled' });
    const kept = await created();
    await withTransaction(pool, (tx) =>
      saveTasks(tx, [
        { before: null, after: fresh },
        { before: kept, after: null },
        { before: null, after: null },
      ]),
    );
    expect(await loadTask(pool, fresh.taskId)).toMatchObject({ ...fresh, version: 1 });
    expect(await loadTask(pool, kept.taskId)).toMatchObject({ ...kept, version: 1 });
  });

  it('hands each expired lease past the grace period to one sweeper at a time, and skips leases still running or within the grace', async () => {
    // Before every other test's lease: only this test's tasks can have expired.
    const now = new Date('2029-06-01T12:00:00.000Z');
    const projectId = randomUUID() as ProjectId;
    const lease = (ms: number) => new Date(now.getTime() + ms).toISOString();
    const expired = [await created({ projectId, status: 'assigned', assignee: 'ann-1' as AnnotatorId, leaseExpiresAt: lease(-60_000) }), await created({ projectId, status: 'assigned', assignee: 'ann-2' as AnnotatorId, leaseExpiresAt: lease(-30_000) })];
    const withinGrace = await created({ projectId, status: 'assigned', assignee: 'ann-3' as AnnotatorId, leaseExpiresAt: lease(-1_000) });
    const running = await created({ projectId, status: 'assigned', assignee: 'ann-4' as AnnotatorId, leaseExpiresAt: lease(60_000) });
    const claimedFirst = latch();
    const done = latch();
    const first = withTransaction(pool, async (tx) => {
      const claimed = await claimExpiredLeases(tx, 1, now, 5_000);
      claimedFirst.open();
      await done.opened;
      return claimed;
    });
    await claimedFirst.opened;
    const second = await withTransaction(pool, (tx) => claimExpiredLeases(tx, 10, now, 5_000));
    done.open();
    const firstClaimed = await first;
    // Oldest lease first; the other sweeper skips it instead of waiting for it.
    expect(firstClaimed).toEqual([expired[0]!.taskId]);
    expect(second).toContain(expired[1]!.taskId);
    expect(second).not.toContain(expired[0]!.taskId);
    expect(second).not.toContain(withinGrace.taskId);
    expect(second).not.toContain(running.taskId);
  });
});

describe('task-svc batch statements under generic plans', () => {
  let pool: pg.Pool;
  // A table of some thousands of rows, analyzed (by autovacuum, or by the service when it is off).
  // A plan that hash-joins the batch over a sequential scan is cheapest here on paper, and is kept
  // by the connection as the table grows to millions. The service's pool: named prepared statements.
  const db = freshDatabase(
    infra.pgUrl,
    'taskplans',
    async (p) => {
      await migrate(p, migrations);
      await p.query(`INSERT INTO tasks (task_id, project_id, title, data_uri, status, attempt, version) SELECT g::text, gen_random_uuid(), 't', 's3://b/k', 'open', 1, 1 FROM generate_series(1, 2000) g`);
      await p.query('ANALYZE tasks');
    },
    { pool: (url) => createPool(url, { max: 2, refuseNestedConnections: true }) },
  );
  beforeAll(async () => void (pool = await db.open()));
  afterAll(() => db.close());

  it("loads and saves a batch's tasks through the primary key, never scanning the whole table", async () => {
    const scans = await withTransaction(pool, (tx) =>
      seqScansOf(tx, ['tasks'], async () => {
        const batch = await loadTasksForUpdate(tx, ['17', '1234'] as TaskId[]);
        await saveTasks(tx, [...batch.values()].map((before) => ({ before: before!, after: { ...before!, status: 'assigned' as const, assignee: 'ann-1' as AnnotatorId } })));
      }),
    );
    expect(scans).toEqual({ tasks: 0 });
    expect((await pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM tasks WHERE status = 'assigned'`)).rows[0]?.n).toBe(2);
  });
});
