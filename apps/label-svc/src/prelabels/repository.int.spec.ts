import { randomUUID } from 'node:crypto';
import type pg from 'pg';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { buildPrelabelProposed, type DomainEvent, type ProjectId, type TaskId } from '@labelflow/contracts';
import { migrate, withTransaction } from '@labelflow/service-kit';
import { eventually, freshDatabase, freshSnowflake } from '@labelflow/testing';
import { loadLabelTasksForUpdate, saveLabelTasks } from '../labels/repository';
import { evolve } from '../labels/state';
import { migrations } from '../migrations';
import { listPrelabels, loadPolicies, loadPolicy, savePolicy } from './repository';

const infra = inject('infra');

describe('label-svc pre-label repository', () => {
  let pool: pg.Pool;
  const projectId = randomUUID() as ProjectId;
  const db = freshDatabase(infra.pgUrl, 'prelabelrepo', (p) => migrate(p, migrations));
  beforeAll(async () => void (pool = await db.open()));
  afterAll(() => db.close());

  const proposal = (taskId: TaskId, attempt: number, version: string, of: ProjectId = projectId) =>
    buildPrelabelProposed({ id: `p-${version}-${of}`, taskId, projectId: of, attempt, model: { name: 'cat-detector', version }, annotations: [{ label: 'cat', confidence: 0.8 }], occurredAt: '2030-01-01T00:00:00.000Z' });

  it('keeps one policy per project, the last one set, and answers null for a project without one', async () => {
    const fresh = randomUUID() as ProjectId;
    expect(await loadPolicy(pool, fresh)).toBeNull();
    await savePolicy(pool, { projectId: fresh, autoSubmit: true, minConfidence: 0.7, model: null }, 'manager-1');
    const second = await savePolicy(pool, { projectId: fresh, autoSubmit: false, minConfidence: 0.9, model: { name: 'cat-detector', version: '2' } as never }, 'owner-1');
    expect(second).toMatchObject({ projectId: fresh, autoSubmit: false, minConfidence: 0.9, model: { name: 'cat-detector', version: '2' }, updatedBy: 'owner-1' });
    expect(await loadPolicy(pool, fresh)).toEqual(second);
  });

  it('makes a policy change wait for a batch that decided under the old policy, so its answer means no later commit uses the old one', async () => {
    const project = randomUUID() as ProjectId;
    await savePolicy(pool, { projectId: project, autoSubmit: true, minConfidence: 0.7, model: null }, 'manager-1');
    let changed = false;
    let release!: () => void;
    const holding = new Promise<void>((resolve) => (release = resolve));
    let loaded!: () => void;
    const batchLoaded = new Promise<void>((resolve) => (loaded = resolve));
    const batch = withTransaction(pool, async (tx) => {
      expect((await loadPolicies(tx, [project], { share: true })).get(project)).toMatchObject({ autoSubmit: true });
      loaded();
      await holding;
    });
    await batchLoaded;
    const change = savePolicy(pool, { projectId: project, autoSubmit: false, minConfidence: 0.7, model: null }, 'manager-1').then(() => void (changed = true));
    // The change waits on the batch's share lock until the batch ends.
    await eventually(async () => expect((await pool.query<{ n: number }>("SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'")).rows[0]?.n).toBe(1));
    expect(changed).toBe(false);
    release();
    await batch;
    await change;
    expect(await loadPolicy(pool, project)).toMatchObject({ autoSubmit: false });
  });

  it("loads the project's policy with a batch carrying proposals, and stores the batch's proposals without an assignment row", async () => {
    const taskId = freshSnowflake() as TaskId;
    await savePolicy(pool, { projectId, autoSubmit: false, minConfidence: 0.9, model: null }, 'manager-1');
    const events = [proposal(taskId, 1, '1'), proposal(taskId, 1, '2')];
    await withTransaction(pool, async (tx) => {
      const states = await loadLabelTasksForUpdate(tx, [taskId], events);
      const before = states.get(taskId)!;
      expect(before.prelabelPolicy?.projectId).toBe(projectId);
      const after = events.reduce(evolve, before);
      await saveLabelTasks(tx, [{ before, after }]);
    });

    expect((await listPrelabels(pool, taskId, 1, projectId, 50)).map((p) => [p.model.version, p.proposalId, p.annotations, p.autoSubmitted])).toEqual([
      ['1', `p-1-${projectId}`, [{ label: 'cat', confidence: 0.8 }], false],
      ['2', `p-2-${projectId}`, [{ label: 'cat', confidence: 0.8 }], false],
    ]);
    expect(await listPrelabels(pool, taskId, 2, projectId, 50)).toEqual([]);
    // Bounded to the latest ones, still in the order they arrived.
    expect((await listPrelabels(pool, taskId, 1, projectId, 1)).map((p) => p.model.version)).toEqual(['2']);
    const { rows } = await pool.query('SELECT 1 FROM assignments WHERE task_id = $1', [taskId]);
    expect(rows).toEqual([]);
  });

  it("keeps a proposal naming another project apart from the task's own, never lists it, and never lends the task its project's policy", async () => {
    const taskId = freshSnowflake() as TaskId;
    const other = randomUUID() as ProjectId;
    await savePolicy(pool, { projectId: other, autoSubmit: true, minConfidence: 0, model: null }, 'stranger-1');
    await savePolicy(pool, { projectId, autoSubmit: false, minConfidence: 0.9, model: null }, 'manager-1');
    // Before label-svc knows the task: the misaddressed proposal comes first, then the task's own from the same model version.
    const events = [proposal(taskId, 1, '7', other), proposal(taskId, 1, '7')];
    await withTransaction(pool, async (tx) => {
      const states = await loadLabelTasksForUpdate(tx, [taskId], events);
      const before = states.get(taskId)!;
      const after = events.reduce(evolve, before);
      await saveLabelTasks(tx, [{ before, after }]);
    });
    expect((await pool.query('SELECT project_id FROM prelabels WHERE task_id = $1 ORDER BY project_id', [taskId])).rows.map((r) => r.project_id).sort()).toEqual([projectId, other].sort());
    expect((await listPrelabels(pool, taskId, 1, projectId, 50)).map((p) => p.proposalId)).toEqual([`p-7-${projectId}`]);

    // Once the task's project is known, a batch carrying both takes that project's policy.
    await pool.query('INSERT INTO assignments (task_id, project_id, attempt, annotator_id, version) VALUES ($1, $2, 1, $3, 1)', [taskId, projectId, 'ann-1']);
    await withTransaction(pool, async (tx) => {
      const states = await loadLabelTasksForUpdate(tx, [taskId], [proposal(taskId, 1, '8'), proposal(taskId, 1, '8', other)]);
      expect(states.get(taskId)!.prelabelPolicy?.projectId).toBe(projectId);
    });
  });

  it("takes the policy of the project a TaskAssigned in the same batch names, whatever project the batch's last proposal names", async () => {
    const taskId = freshSnowflake() as TaskId;
    const other = randomUUID() as ProjectId;
    await savePolicy(pool, { projectId: other, autoSubmit: false, minConfidence: 0.5, model: null }, 'stranger-1');
    await savePolicy(pool, { projectId, autoSubmit: true, minConfidence: 0.5, model: null }, 'manager-1');
    const assigned = {
      id: freshSnowflake(),
      type: 'TaskAssigned',
      version: 1,
      taskId,
      projectId,
      attempt: 1,
      occurredAt: '2030-01-01T00:00:00.000Z',
      producer: 'task-svc',
      payload: { annotatorId: 'ann-1', leaseExpiresAt: '2030-01-02T00:00:00.000Z' },
    } as unknown as DomainEvent;
    await withTransaction(pool, async (tx) => {
      const states = await loadLabelTasksForUpdate(tx, [taskId], [assigned, proposal(taskId, 1, '9'), proposal(taskId, 1, '9', other)]);
      expect(states.get(taskId)!.prelabelPolicy?.projectId).toBe(projectId);
    });
  });
});

