import { randomUUID } from 'node:crypto';
import type pg from 'pg';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import type { AnnotatorId, ProjectId, ReviewerId, TaskId } from '@labelflow/contracts';
import { createPool, decodeCursor, encodeCursor, migrate, withTransaction } from '@labelflow/service-kit';
import { createTestDatabase, createTestPool, eventually, freshSnowflake, latch, seqScansOf, uniqueName, freshDatabase } from '@labelflow/testing';
import { migrations } from '../migrations';
import { claimDueReviews, isCancelled, listReviewRows, loadReviews, loadReviewsForUpdate, pageReviewRows, ReviewListPosition, saveReviews, saveReviewsMany, type ReviewListFilter } from './repository';
import { emptyState, evolve, type Review, type ReviewTaskState } from './state';

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


describe('qa-svc review repository', () => {
  let pool: pg.Pool;
  const projectId = randomUUID() as ProjectId;
  const db = freshDatabase(infra.pgUrl, 'reviewrepo', (p) => migrate(p, migrations));
  beforeAll(async () => void (pool = await db.open()));
  afterAll(() => db.close());

  const newTaskId = () => freshSnowflake() as TaskId;
  const review = (attempt: number, over: Partial<Review> = {}): Review => ({
    attempt,
    projectId,
    annotatorId: 'ann-1' as AnnotatorId,
    status: 'pending',
    reviewerId: null,
    reason: null,
    deadlineAt: '2030-01-01T00:00:00.000Z',
    closeReason: null,
    billed: false,
    ...over,
  });
  /** Saves `next` over what the task has now, in one transaction that takes the task's lock first, as every writer does. */
  const write = (taskId: TaskId, change: (current: ReviewTaskState) => ReviewTaskState) =>
    withTransaction(pool, async (tx) => {
      const current = await loadReviews(tx, taskId);
      const next = change(current);
      await saveReviews(tx, current, next);
      return next;
    });
  const read = (taskId: TaskId) => loadReviews(pool, taskId, false);
  const decidedAt = async (taskId: TaskId, attempt: number) =>
    (await pool.query<{ decided_at: Date | null }>('SELECT decided_at FROM reviews WHERE task_id = $1 AND attempt = $2', [taskId, attempt])).rows[0]?.decided_at;
  /** Resolves once a session of this test's database waits for a lock another transaction holds. */
  const someoneWaitsForALock = () =>
    eventually(async () => {
      const { rows } = await pool.query<{ n: number }>("SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'");
      expect(rows[0]?.n).toBe(1);
    });

  it("creates the task's row on a locking load, and a read without the lock creates nothing", async () => {
    const [readOnly, locked] = [newTaskId(), newTaskId()];
    expect(await read(readOnly)).toEqual(emptyState(readOnly));
    expect((await pool.query('SELECT 1 FROM review_tasks WHERE task_id = $1', [readOnly])).rowCount).toBe(0);
    expect(await withTransaction(pool, (tx) => loadReviews(tx, locked))).toEqual(emptyState(locked));
    expect((await pool.query('SELECT 1 FROM review_tasks WHERE task_id = $1', [locked])).rowCount).toBe(1);
  });

  it('loads reviews as saved, oldest attempt first, with the decision time set when a status changes and kept when it does not', async () => {
    const taskId = newTaskId();
    await write(taskId, (s) => ({ ...s, reviews: [review(1)] }));
    expect(await read(taskId)).toEqual({ ...emptyState(taskId), reviews: [review(1)] });
    expect(await decidedAt(taskId, 1)).toBeNull();

    const passed = review(1, { status: 'passed', reviewerId: 'rev-1' as ReviewerId });
    await write(taskId, (s) => ({ ...s, reviews: [passed] }));
    const firstDecision = await decidedAt(taskId, 1);
    expect(firstDecision).toBeInstanceOf(Date);
    // Written again with the same status (a new object, so it is saved): the decision time stays.
    await write(taskId, (s) => ({ ...s, reviews: [{ ...passed }] }));
    expect(await decidedAt(taskId, 1)).toEqual(firstDecision);

    const revoked = review(1, { status: 'revoked', reviewerId: 'rev-1' as ReviewerId, closeReason: 'SUPERSEDED' });
    await write(taskId, (s) => ({ ...s, reopenedAttempt: 2, formerAnnotators: ['ann-1' as AnnotatorId], reviews: [revoked, review(2, { annotatorId: 'ann-2' as AnnotatorId })] }));
    expect(await read(taskId)).toEqual({ ...emptyState(taskId), reopenedAttempt: 2, formerAnnotators: ['ann-1'], reviews: [revoked, review(2, { annotatorId: 'ann-2' as AnnotatorId })] });
    expect((await decidedAt(taskId, 1))!.getTime()).toBeGreaterThanOrEqual(firstDecision!.getTime());
  });

  it("serializes two writers of one task on its row, even before it has one: the second waits, then loads what the first saved", async () => {
    const taskId = newTaskId();
    const [firstSaved, commit] = [latch(), latch()];
    const first = withTransaction(pool, async (tx) => {
      const current = await loadReviews(tx, taskId);
      await saveReviews(tx, current, { ...current, reviews: [review(1)] });
      firstSaved.open();
      await commit.opened;
    });
    await firstSaved.opened;
    const second = withTransaction(pool, (tx) => loadReviews(tx, taskId));
    await someoneWaitsForALock();
    commit.open();
    await first;
    expect(await second).toEqual({ ...emptyState(taskId), reviews: [review(1)] });
  });

  it("takes, for a batch, the same task locks a single writer takes: a decision on one of its tasks waits for the batch's commit", async () => {
    const [a, b] = [newTaskId(), newTaskId()];
    await write(b, (s) => ({ ...s, reviews: [review(1)] }));
    const [locked, commit] = [latch(), latch()];
    const batch = withTransaction(pool, async (tx) => {
      const states = await loadReviewsForUpdate(tx, [b, a]);
      locked.open();
      const changes = [a, b].map((id) => ({ before: states.get(id)!, after: evolve(states.get(id)!, { type: 'TaskReopened', version: 1, taskId: id, projectId, attempt: 2, payload: { reason: 'QA_TIMED_OUT', previousAttempt: 1, previousAnnotatorId: null } }) }));
      await saveReviewsMany(tx, changes);
      await commit.opened;
    });
    await locked.opened;
    const decision = withTransaction(pool, (tx) => loadReviews(tx, b));
    await someoneWaitsForALock();
    commit.open();
    await batch;
    expect(await decision).toEqual({ ...emptyState(b), reopenedAttempt: 2, reviews: [review(1, { status: 'voided', closeReason: 'SUPERSEDED' })] });
    expect(await read(a)).toEqual({ ...emptyState(a), reopenedAttempt: 2 });
  });

  it("loads a batch with one query per table: a row made for each task it did not know, and each task's reviews in attempt order", async () => {
    const [known, unknown] = [newTaskId(), newTaskId()];
    await write(known, (s) => ({ ...s, reviews: [review(2), review(1, { status: 'rejected', reviewerId: 'rev-1' as ReviewerId, reason: 'blurry' })] }));
    const states = await withTransaction(pool, (tx) => loadReviewsForUpdate(tx, [unknown, known]));
    expect(states.get(unknown)).toEqual(emptyState(unknown));
    expect(states.get(known)?.reviews.map((r) => [r.attempt, r.status])).toEqual([
      [1, 'rejected'],
      [2, 'pending'],
    ]);
    expect((await pool.query('SELECT 1 FROM review_tasks WHERE task_id = $1', [unknown])).rowCount).toBe(1);
  });

  it("saves a batch's changed reviews in one upsert and leaves unchanged ones as they were", async () => {
    const [a, b] = [newTaskId(), newTaskId()];
    await write(a, (s) => ({ ...s, reviews: [review(1)] }));
    await write(b, (s) => ({ ...s, reviews: [review(1, { status: 'passed', reviewerId: 'rev-1' as ReviewerId })] }));
    const bDecidedAt = await decidedAt(b, 1);
    await withTransaction(pool, async (tx) => {
      const states = await loadReviewsForUpdate(tx, [a, b]);
      await saveReviewsMany(tx, [
        { before: states.get(a)!, after: { ...states.get(a)!, reviews: [review(1, { status: 'timed_out' })] } },
        { before: states.get(b)!, after: states.get(b)! },
      ]);
    });
    expect((await read(a)).reviews).toEqual([review(1, { status: 'timed_out' })]);
    expect((await read(b)).reviews).toEqual([review(1, { status: 'passed', reviewerId: 'rev-1' as ReviewerId })]);
    expect(await decidedAt(b, 1)).toEqual(bDecidedAt);
  });

  it('keeps a tombstone for a task cancelled before qa-svc saw its labels, and the first cancellation time through later saves', async () => {
    const taskId = newTaskId();
    await withTransaction(pool, async (tx) => {
      const before = (await loadReviewsForUpdate(tx, [taskId])).get(taskId)!;
      const after = evolve(before, { type: 'TaskCancelled', version: 1, taskId, projectId, attempt: 1, payload: { reason: 'no longer needed', cancelledBy: 'manager-1', previousStatus: 'open' } });
      await saveReviewsMany(tx, [{ before, after }]);
    });
    expect(await read(taskId)).toEqual({ ...emptyState(taskId), cancelled: true });
    expect(await isCancelled(pool, taskId)).toBe(true);
    const cancelledAt = async () => (await pool.query<{ cancelled_at: Date }>('SELECT cancelled_at FROM review_tasks WHERE task_id = $1', [taskId])).rows[0]?.cancelled_at;
    const first = await cancelledAt();
    await write(taskId, (s) => ({ ...s, reopenedAttempt: 4 }));
    expect(await cancelledAt()).toEqual(first);
    expect(await read(taskId)).toEqual({ ...emptyState(taskId), cancelled: true, reopenedAttempt: 4 });
    expect(await isCancelled(pool, newTaskId())).toBe(false);
  });

  it('records a TaskReopened that arrives before the task has a review, so labels of the older attempt are known to be stale and their annotator may not review', async () => {
    const taskId = newTaskId();
    await withTransaction(pool, async (tx) => {
      const before = (await loadReviewsForUpdate(tx, [taskId])).get(taskId)!;
      const after = evolve(before, { type: 'TaskReopened', version: 1, taskId, projectId, attempt: 3, payload: { reason: 'LEASE_EXPIRED', previousAttempt: 2, previousAnnotatorId: 'ann-1' as AnnotatorId } });
      await saveReviewsMany(tx, [{ before, after }]);
    });
    expect(await read(taskId)).toEqual({ ...emptyState(taskId), reopenedAttempt: 3, formerAnnotators: ['ann-1'] });
  });

  it("claims the tasks whose latest review is pending past its deadline, oldest first, each for one sweeper at a time", async () => {
    const now = new Date('2029-01-01T00:00:00.000Z');
    const at = (ms: number) => new Date(now.getTime() + ms).toISOString();
    const [oldest, due, notYet, superseded, decided] = [newTaskId(), newTaskId(), newTaskId(), newTaskId(), newTaskId()];
    await write(oldest, (s) => ({ ...s, reviews: [review(1, { deadlineAt: at(-60_000) })] }));
    await write(due, (s) => ({ ...s, reviews: [review(1, { deadlineAt: at(-1_000) })] }));
    await write(notYet, (s) => ({ ...s, reviews: [review(1, { deadlineAt: at(60_000) })] }));
    // Only the latest attempt's review counts: an older pending one whose attempt moved on is not due.
    await write(superseded, (s) => ({ ...s, reviews: [review(1, { deadlineAt: at(-90_000) }), review(2, { deadlineAt: at(60_000) })] }));
    await write(decided, (s) => ({ ...s, reviews: [review(1, { status: 'passed', reviewerId: 'rev-1' as ReviewerId, deadlineAt: at(-90_000) })] }));
    const [claimed, done] = [latch(), latch()];
    const first = withTransaction(pool, async (tx) => {
      const mine = await claimDueReviews(tx, 1, now);
      claimed.open();
      await done.opened;
      return mine;
    });
    await claimed.opened;
    const second = await withTransaction(pool, (tx) => claimDueReviews(tx, 10, now));
    done.open();
    expect(await first).toEqual([oldest]);
    expect(second).toEqual([due]);
  });
});

describe('qa-svc batch statements under generic plans', () => {
  let pool: pg.Pool;
  // Thousands of tasks with a review each, analyzed (by autovacuum, or by the service when it is
  // off), behind the service's pool: named prepared statements, whose generic plans it keeps.
  const db = freshDatabase(
    infra.pgUrl,
    'qaplans',
    async (p) => {
      await migrate(p, migrations);
      await p.query(`INSERT INTO review_tasks (task_id) SELECT g::text FROM generate_series(1, 2000) g`);
      await p.query(`INSERT INTO reviews (task_id, attempt, project_id, annotator_id, status) SELECT g::text, 1, gen_random_uuid(), 'ann-1', 'pending' FROM generate_series(1, 2000) g`);
      await p.query('ANALYZE review_tasks, reviews');
    },
    { pool: (url) => createPool(url, { max: 2, refuseNestedConnections: true }) },
  );
  beforeAll(async () => void (pool = await db.open()));
  afterAll(() => db.close());

  it("loads and saves a batch's review tasks through their keys, never scanning the tables", async () => {
    const scans = await withTransaction(pool, (tx) =>
      seqScansOf(tx, ['review_tasks', 'reviews'], async () => {
        const batch = await loadReviewsForUpdate(tx, ['17', '1234'] as TaskId[]);
        await saveReviewsMany(tx, [...batch.values()].map((before) => ({ before, after: { ...before, reopenedAttempt: 2, formerAnnotators: before.taskId === '17' ? ['ann-1' as AnnotatorId] : ['ann-1' as AnnotatorId, 'ann "2"' as AnnotatorId] } })));
      }),
    );
    expect(scans).toEqual({ review_tasks: 0, reviews: 0 });
    const rows = await pool.query<{ reopened_attempt: number }>(`SELECT reopened_attempt FROM review_tasks WHERE task_id IN ('17', '1234')`);
    expect(rows.rows).toEqual([{ reopened_attempt: 2 }, { reopened_attempt: 2 }]);
    const loaded = await withTransaction(pool, (tx) => loadReviewsForUpdate(tx, ['17', '1234'] as TaskId[]));
    expect([loaded.get('17')?.formerAnnotators, loaded.get('1234')?.formerAnnotators]).toEqual([['ann-1'], ['ann-1', 'ann "2"']]);
  });
});
