import { randomUUID } from 'node:crypto';
import type pg from 'pg';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import type { AnnotatorId, ProjectId, TaskId } from '@labelflow/contracts';
import { createPool, migrate, ServiceKitErrors, withTransaction } from '@labelflow/service-kit';
import { eventually, freshSnowflake, latch, freshDatabase, seqScansOf } from '@labelflow/testing';
import { migrations } from '../migrations';
import { loadLabelTask, loadLabelTasksForUpdate, saveLabelTask, saveLabelTasks } from './repository';
import { emptyState, evolve, type Label, type LabelTaskState } from './state';

const infra = inject('infra');


const annotator = 'ann-1' as AnnotatorId;
const label = (attempt: number, over: Partial<Label> = {}): Label => ({
  attempt,
  annotatorId: annotator,
  annotations: [{ label: 'cat', confidence: 0.9 }, { label: 'sofa' }],
  status: 'submitted',
  voidReason: null,
  billed: false,
  ...over,
});

describe('label-svc assignment and label repository', () => {
  let pool: pg.Pool;
  const projectId = randomUUID() as ProjectId;
  const db = freshDatabase(infra.pgUrl, 'labelrepo', (p) => migrate(p, migrations));
  beforeAll(async () => void (pool = await db.open()));
  afterAll(() => db.close());

  const newTaskId = () => freshSnowflake() as TaskId;
  /** The state after the task's first TaskAssigned, as `evolve` folds it (version 0: no row yet). */
  const assigned = (taskId: TaskId, attempt = 1): LabelTaskState => ({
    ...emptyState(taskId),
    assignment: { projectId, attempt, annotatorId: annotator, leaseExpiresAt: '2030-01-01T00:00:00.000Z', version: 0 },
  });
  const saved = async (state: LabelTaskState) => {
    await withTransaction(pool, (tx) => saveLabelTask(tx, emptyState(state.taskId), state));
    return withTransaction(pool, (tx) => loadLabelTask(tx, state.taskId));
  };
  /** Resolves once a session of this test's database waits for a lock another transaction holds. */
  const someoneWaitsForALock = () =>
    eventually(async () => {
      const { rows } = await pool.query<{ n: number }>("SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'");
      expect(rows[0]?.n).toBe(1);
    });

  it('loads a task it has no row of as the empty state', async () => {
    const taskId = newTaskId();
    expect(await loadLabelTask(pool, taskId, false)).toEqual(emptyState(taskId));
  });

  it('loads an assignment and its labels as saved, and each compare-and-set save bumps the assignment version', async () => {
    const taskId = newTaskId();
    const first = await saved({ ...assigned(taskId), labels: [label(1)] });
    expect(first).toEqual({ ...assigned(taskId), assignment: { ...assigned(taskId).assignment!, version: 1 }, labels: [label(1)] });

    // Reopened: the attempt moves on with nobody assigned, and the older labels are voided.
    const reopened: LabelTaskState = { ...first, assignment: { ...first.assignment!, attempt: 2, annotatorId: null, leaseExpiresAt: null }, labels: [label(1, { status: 'voided', voidReason: 'SUPERSEDED' })] };
    await withTransaction(pool, (tx) => saveLabelTask(tx, first, reopened));
    const second = await loadLabelTask(pool, taskId, false);
    expect(second).toEqual({ ...reopened, assignment: { ...reopened.assignment!, version: 2 } });

    const relabelled: LabelTaskState = { ...second, assignment: { ...second.assignment!, annotatorId: 'ann-2' as AnnotatorId }, labels: [...second.labels, label(2, { annotatorId: 'ann-2' as AnnotatorId, status: 'accepted' })] };
    await withTransaction(pool, (tx) => saveLabelTask(tx, second, relabelled));
    expect(await loadLabelTask(pool, taskId, false)).toEqual({ ...relabelled, assignment: { ...relabelled.assignment!, version: 3 } });
  });

  it('refuses an assignment save from a stale version, and a first assignment of a task that has one, with a retriable CONCURRENT_UPDATE', async () => {
    const taskId = newTaskId();
    const current = await saved(assigned(taskId));
    await withTransaction(pool, (tx) => saveLabelTask(tx, current, { ...current, assignment: { ...current.assignment!, attempt: 2, annotatorId: null } }));
    const stale = withTransaction(pool, (tx) => saveLabelTask(tx, current, { ...current, assignment: { ...current.assignment!, leaseExpiresAt: null } }));
    await expect(stale).rejects.toMatchObject({ code: ServiceKitErrors.CONCURRENT_UPDATE, retriable: true });
    const again = withTransaction(pool, (tx) => saveLabelTask(tx, emptyState(taskId), assigned(taskId, 3)));
    await expect(again).rejects.toMatchObject({ code: ServiceKitErrors.CONCURRENT_UPDATE, retriable: true });
    expect((await loadLabelTask(pool, taskId, false)).assignment).toMatchObject({ attempt: 2, annotatorId: null, version: 2 });
  });

  it("makes two batches that first see a task race to its row: the second waits for the first's commit, then fails with CONCURRENT_UPDATE", async () => {
    const taskId = newTaskId();
    const [firstInserted, commit] = [latch(), latch()];
    const first = withTransaction(pool, async (tx) => {
      const before = (await loadLabelTasksForUpdate(tx, [taskId])).get(taskId)!;
      await saveLabelTasks(tx, [{ before, after: assigned(taskId) }]);
      firstInserted.open();
      await commit.opened;
    });
    await firstInserted.opened;
    const second = withTransaction(pool, async (tx) => {
      // No row to lock yet: the second batch reads the empty state too, and only the insert meets the first.
      const before = (await loadLabelTasksForUpdate(tx, [taskId])).get(taskId)!;
      expect(before).toEqual(emptyState(taskId));
      await saveLabelTasks(tx, [{ before, after: assigned(taskId, 2) }]);
    });
    await someoneWaitsForALock();
    commit.open();
    const [won, lost] = await Promise.allSettled([first, second]);
    expect(won.status).toBe('fulfilled');
    expect(lost).toMatchObject({ status: 'rejected', reason: { code: ServiceKitErrors.CONCURRENT_UPDATE, retriable: true } });
    expect((await loadLabelTask(pool, taskId, false)).assignment).toMatchObject({ attempt: 1, annotatorId: annotator, version: 1 });
  });

  it("locks a batch's assignment rows: a second batch over the same tasks waits, then loads what the first one saved", async () => {
    const [a, b] = [newTaskId(), newTaskId()];
    await saved(assigned(a));
    await saved(assigned(b));
    const [locked, commit] = [latch(), latch()];
    const first = withTransaction(pool, async (tx) => {
      const batch = await loadLabelTasksForUpdate(tx, [a, b]);
      locked.open();
      await saveLabelTasks(tx, [a, b].map((id) => ({ before: batch.get(id)!, after: { ...batch.get(id)!, labels: [label(1)] } })));
      await commit.opened;
    });
    await locked.opened;
    const second = withTransaction(pool, (tx) => loadLabelTasksForUpdate(tx, [b, a]));
    await someoneWaitsForALock();
    commit.open();
    await first;
    const seen = await second;
    expect(seen.get(a)?.labels).toEqual([label(1)]);
    expect(seen.get(b)?.labels).toEqual([label(1)]);
  });

  it("loads a batch with one query per table: an empty state for a task it has no row of, and each task's labels in attempt order", async () => {
    const [known, unknown] = [newTaskId(), newTaskId()];
    await saved({ ...assigned(known, 3), labels: [label(2, { status: 'rejected' }), label(1, { status: 'voided', voidReason: 'QA_TIMED_OUT' }), label(3)] });
    const batch = await withTransaction(pool, (tx) => loadLabelTasksForUpdate(tx, [unknown, known]));
    expect(batch.get(unknown)).toEqual(emptyState(unknown));
    expect(batch.get(known)?.labels.map((l) => [l.attempt, l.status, l.voidReason])).toEqual([
      [1, 'voided', 'QA_TIMED_OUT'],
      [2, 'rejected', null],
      [3, 'submitted', null],
    ]);
  });

  it("saves a batch's changed labels in one upsert: a new status and void reason replace the stored ones, the annotations stay", async () => {
    const [a, b] = [newTaskId(), newTaskId()];
    await saved({ ...assigned(a), labels: [label(1)] });
    await saved({ ...assigned(b), labels: [label(1)] });
    await withTransaction(pool, async (tx) => {
      const batch = await loadLabelTasksForUpdate(tx, [a, b]);
      const before = [batch.get(a)!, batch.get(b)!];
      await saveLabelTasks(tx, [
        { before: before[0]!, after: { ...before[0]!, labels: [label(1, { status: 'voided', voidReason: 'BILLING_FAILED', annotations: [{ label: 'ignored' }] })] } },
        { before: before[1]!, after: { ...before[1]!, labels: [label(1, { status: 'accepted' })] } },
      ]);
    });
    expect((await loadLabelTask(pool, a, false)).labels).toEqual([label(1, { status: 'voided', voidReason: 'BILLING_FAILED' })]);
    expect((await loadLabelTask(pool, b, false)).labels).toEqual([label(1, { status: 'accepted' })]);
  });

  it('keeps a tombstone for a task cancelled before label-svc knew it, with its attempt, through later saves', async () => {
    const taskId = newTaskId();
    const cancelled = evolve(emptyState(taskId), {
      type: 'TaskCancelled',
      version: 1,
      taskId,
      projectId,
      attempt: 2,
      payload: { reason: 'no longer needed', cancelledBy: 'manager-1', previousStatus: 'open' },
    });
    await withTransaction(pool, async (tx) => {
      const before = (await loadLabelTasksForUpdate(tx, [taskId])).get(taskId)!;
      await saveLabelTasks(tx, [{ before, after: cancelled }]);
    });
    const tombstone = await loadLabelTask(pool, taskId, false);
    expect(tombstone).toEqual({ ...emptyState(taskId), cancelled: true, assignment: { projectId, attempt: 2, annotatorId: null, leaseExpiresAt: null, version: 1 } });

    const cancelledAt = async () => (await pool.query<{ cancelled_at: Date }>('SELECT cancelled_at FROM assignments WHERE task_id = $1', [taskId])).rows[0]?.cancelled_at;
    const firstCancelledAt = await cancelledAt();
    expect(firstCancelledAt).toBeInstanceOf(Date);
    // A later save of the cancelled row keeps the first cancellation's time.
    await withTransaction(pool, (tx) => saveLabelTasks(tx, [{ before: tombstone, after: { ...tombstone, assignment: { ...tombstone.assignment!, attempt: 3 } } }]));
    expect(await cancelledAt()).toEqual(firstCancelledAt);
    expect(await loadLabelTask(pool, taskId, false)).toMatchObject({ cancelled: true, assignment: { attempt: 3, version: 2 } });
  });

  it('keeps the row a TaskReopened creates for a task label-svc never saw assigned: the new attempt, with nobody on it', async () => {
    const taskId = newTaskId();
    const reopened = evolve(emptyState(taskId), {
      type: 'TaskReopened',
      version: 1,
      taskId,
      projectId,
      attempt: 3,
      payload: { reason: 'QA_REJECTED', previousAttempt: 2, previousAnnotatorId: annotator },
    });
    await withTransaction(pool, (tx) => saveLabelTasks(tx, [{ before: emptyState(taskId), after: reopened }]));
    expect(await loadLabelTask(pool, taskId, false)).toEqual({ ...emptyState(taskId), assignment: { projectId, attempt: 3, annotatorId: null, leaseExpiresAt: null, version: 1 } });
  });

  it('writes nothing for a batch whose states did not change', async () => {
    const taskId = newTaskId();
    const current = await saved({ ...assigned(taskId), labels: [label(1)] });
    await withTransaction(pool, (tx) => saveLabelTasks(tx, [{ before: current, after: current }]));
    expect(await loadLabelTask(pool, taskId, false)).toEqual(current);
  });
});

describe('label-svc batch statements under generic plans', () => {
  let pool: pg.Pool;
  // Thousands of assignments with their labels, analyzed (by autovacuum, or by the service when it
  // is off), behind the service's pool: named prepared statements, whose generic plans it keeps.
  const db = freshDatabase(
    infra.pgUrl,
    'labelplans',
    async (p) => {
      await migrate(p, migrations);
      await p.query(`INSERT INTO assignments (task_id, project_id, attempt, annotator_id, version) SELECT g::text, gen_random_uuid(), 1, 'ann-1', 1 FROM generate_series(1, 2000) g`);
      await p.query(`INSERT INTO labels (task_id, attempt, annotator_id, annotations, status) SELECT g::text, 1, 'ann-1', '[{"label":"cat"}]', 'submitted' FROM generate_series(1, 2000) g`);
      await p.query('ANALYZE assignments, labels');
    },
    { pool: (url) => createPool(url, { max: 2, refuseNestedConnections: true }) },
  );
  beforeAll(async () => void (pool = await db.open()));
  afterAll(() => db.close());

  it("loads and saves a batch's assignments and labels through their keys, never scanning the tables", async () => {
    const scans = await withTransaction(pool, (tx) =>
      seqScansOf(tx, ['assignments', 'labels'], async () => {
        const batch = await loadLabelTasksForUpdate(tx, ['17', '1234'] as TaskId[]);
        await saveLabelTasks(
          tx,
          [...batch.values()].map((before) => ({ before, after: { ...before, assignment: { ...before.assignment!, annotatorId: 'ann-2' as AnnotatorId }, labels: before.labels.map((l) => ({ ...l, status: 'accepted' as const })) } })),
        );
      }),
    );
    expect(scans).toEqual({ assignments: 0, labels: 0 });
    const rows = await pool.query<{ annotator_id: string; status: string }>(`SELECT a.annotator_id, l.status FROM assignments a JOIN labels l USING (task_id) WHERE task_id IN ('17', '1234')`);
    expect(rows.rows).toEqual([{ annotator_id: 'ann-2', status: 'accepted' }, { annotator_id: 'ann-2', status: 'accepted' }]);
  });
});
