import type pg from 'pg';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import type { AnnotatorId, LabelSubmitted, ProjectId, TaskId } from '@labelflow/contracts';
import { migrate, withTransaction, type ServiceContext } from '@labelflow/service-kit';
import { freshDatabase, freshSnowflake } from '@labelflow/testing';
import type { QaSvcConfig } from '../config';
import { migrations } from '../migrations';
import { executeReview } from './execute';
import { listReviewRows } from './repository';
import { reviewDeadlineSweeper } from './sweeper';

const infra = inject('infra');
const projectId = '22222222-2222-4222-8222-222222222222' as ProjectId;
const alice = 'alice' as AnnotatorId;
const t0 = new Date('2030-01-01T00:00:00.000Z');
const slaMs = 60_000;
const at = (ms: number) => new Date(t0.getTime() + ms);
const ctx = { logger: { debug: () => undefined } } as unknown as ServiceContext<QaSvcConfig>;

const labelSubmitted = (taskId: TaskId): LabelSubmitted => ({
  id: freshSnowflake() as LabelSubmitted['id'],
  occurredAt: t0.toISOString(),
  producer: 'label-svc',
  version: 2,
  type: 'LabelSubmitted',
  taskId,
  projectId,
  attempt: 1,
  payload: { annotatorId: alice, annotations: [{ label: 'cat' }], durationMs: null },
});

// The sweeper's path through the real repository and qa-svc's real tables (no SQL faked).
describe('qa-svc: the qa-deadline sweeper', () => {
  let pool: pg.Pool;
  const db = freshDatabase(infra.pgUrl, 'qasweep', (p) => migrate(p, migrations));
  beforeAll(async () => void (pool = await db.open()));
  afterAll(() => db.close());

  const open = async () => {
    const taskId = freshSnowflake() as TaskId;
    const opened = await withTransaction(pool, (tx) => executeReview(tx, { type: 'OpenReview', event: labelSubmitted(taskId), now: t0, slaMs }));
    return { taskId, opened };
  };
  const status = async (taskId: TaskId) => (await listReviewRows(pool, { taskId, limit: 10 })).map((r) => [r.status, r.deadline_at?.toISOString() ?? null]);
  const fire = (taskId: TaskId, now: Date) => withTransaction(pool, (tx) => reviewDeadlineSweeper(ctx).fire(tx, taskId, now));

  it('publishes QaStarted only and stores the deadline when a review opens', async () => {
    const { taskId, opened } = await open();
    expect(opened.ok && opened.events.map((e) => e.type)).toEqual(['QaStarted']);
    expect(await status(taskId)).toEqual([['pending', at(slaMs).toISOString()]]);
  });

  it('claims nothing and fires nothing for a review that is not due yet', async () => {
    const { taskId } = await open();
    const claimed = await withTransaction(pool, (tx) => reviewDeadlineSweeper(ctx).claimDue(tx, 100, at(slaMs - 1)));
    expect(claimed).not.toContain(taskId);
    expect(await fire(taskId, at(slaMs - 1))).toEqual([]);
    expect((await status(taskId))[0]?.[0]).toBe('pending');
  });

  it('claims a due review, fires QaTimedOut once, and nothing when the same key is fired again', async () => {
    const { taskId } = await open();
    const sweeper = reviewDeadlineSweeper(ctx);
    const claimed = await withTransaction(pool, (tx) => sweeper.claimDue(tx, 100, at(slaMs)));
    expect(claimed).toContain(taskId);

    const first = await fire(taskId, at(slaMs));
    const second = await fire(taskId, at(slaMs + 1));

    expect(first).toEqual([
      { type: 'QaTimedOut', version: 1, taskId, projectId, attempt: 1, payload: { annotatorId: alice, deadlineAt: at(slaMs).toISOString() } },
    ]);
    expect((await status(taskId))[0]?.[0]).toBe('timed_out');
    expect(second).toEqual([]);
    const after = await withTransaction(pool, (tx) => sweeper.claimDue(tx, 100, at(slaMs + 1)));
    expect(after).not.toContain(taskId);
    expect(sweeper.name).toBe('qa-deadline');
  });
});
