import { describe, expect, it } from 'vitest';
import type { AnnotatorId, LabelSubmitted, ProjectId, TaskId } from '@labelflow/contracts';
import type { PoolClient, ServiceContext } from '@labelflow/service-kit';
import type { QaSvcConfig } from '../config';
import { executeReview } from './execute';
import { reviewDeadlineSweeper } from './sweeper';

const taskId = '11111111-1111-4111-8111-111111111111' as TaskId;
const projectId = '22222222-2222-4222-8222-222222222222' as ProjectId;
const alice = 'alice' as AnnotatorId;
const t0 = new Date('2030-01-01T00:00:00.000Z');
const slaMs = 60_000;
const at = (ms: number) => new Date(t0.getTime() + ms);

type Row = Record<string, unknown>;

/**
 * Just enough of qa-svc's two tables, answering the repository's statements, to run the real
 * execute/repository/sweeper path without a database (claimDue's SQL is exercised by int tests).
 */
function fakeTx() {
  const tasks = new Map<string, Row>();
  const reviews = new Map<string, Row>();
  const query = async (sql: string, params: unknown[] = []) => {
    const p = params as [string, ...unknown[]];
    if (sql.startsWith('INSERT INTO review_tasks')) {
      if (!tasks.has(p[0])) tasks.set(p[0], { reopened_attempt: 0, cancelled_at: null });
      return { rows: [], rowCount: 1 };
    }
    if (sql.startsWith('SELECT reopened_attempt')) return { rows: tasks.has(p[0]) ? [tasks.get(p[0])] : [], rowCount: 1 };
    if (sql.startsWith('SELECT * FROM reviews')) {
      const rows = [...reviews.values()].filter((r) => r.task_id === p[0]).sort((a, b) => Number(a.attempt) - Number(b.attempt));
      return { rows, rowCount: rows.length };
    }
    if (sql.startsWith('UPDATE review_tasks')) {
      tasks.set(p[0], { reopened_attempt: p[1], cancelled_at: p[2] ? t0 : null });
      return { rows: [], rowCount: 1 };
    }
    if (sql.startsWith('INSERT INTO reviews')) {
      const [task, attempt, project, annotator, status, reviewerId, reason, deadlineAt, closeReason] = p;
      reviews.set(`${task}:${String(attempt)}`, {
        task_id: task,
        attempt,
        project_id: project,
        annotator_id: annotator,
        status,
        reviewer_id: reviewerId,
        reason,
        deadline_at: deadlineAt === null ? null : new Date(String(deadlineAt)),
        close_reason: closeReason,
        opened_at: t0,
        decided_at: null,
      });
      return { rows: [], rowCount: 1 };
    }
    throw new Error(`unexpected statement: ${sql}`);
  };
  return { tx: { query } as unknown as PoolClient, reviews };
}

const labelSubmitted: LabelSubmitted = {
  id: '33333333-3333-4333-8333-333333333333' as LabelSubmitted['id'],
  occurredAt: t0.toISOString(),
  producer: 'label-svc',
  version: 1,
  type: 'LabelSubmitted',
  taskId,
  projectId,
  attempt: 1,
  payload: { annotatorId: alice, annotations: [{ label: 'cat' }] },
};
const ctx = { logger: { debug: () => undefined } } as unknown as ServiceContext<QaSvcConfig>;

describe('qa-svc: the qa-deadline sweeper', () => {
  it('publishes QaStarted only and stores the deadline when a review opens', async () => {
    const { tx, reviews } = fakeTx();

    const result = await executeReview(tx, { type: 'OpenReview', event: labelSubmitted, now: t0, slaMs });

    expect(result.ok && result.events.map((e) => e.type)).toEqual(['QaStarted']);
    expect(reviews.get(`${taskId}:1`)).toMatchObject({ status: 'pending', deadline_at: at(slaMs) });
  });

  it('fires nothing for a review that is not due yet', async () => {
    const { tx, reviews } = fakeTx();
    await executeReview(tx, { type: 'OpenReview', event: labelSubmitted, now: t0, slaMs });

    expect(await reviewDeadlineSweeper(ctx).fire(tx, taskId, at(slaMs - 1))).toEqual([]);
    expect(reviews.get(`${taskId}:1`)?.status).toBe('pending');
  });

  it('fires QaTimedOut once when due, and nothing when the same key is fired again', async () => {
    const { tx, reviews } = fakeTx();
    await executeReview(tx, { type: 'OpenReview', event: labelSubmitted, now: t0, slaMs });
    const sweeper = reviewDeadlineSweeper(ctx);

    const first = await sweeper.fire(tx, taskId, at(slaMs));
    const second = await sweeper.fire(tx, taskId, at(slaMs + 1));

    expect(first).toEqual([
      { type: 'QaTimedOut', version: 1, taskId, projectId, attempt: 1, payload: { annotatorId: alice, deadlineAt: at(slaMs).toISOString() } },
    ]);
    expect(reviews.get(`${taskId}:1`)?.status).toBe('timed_out');
    expect(second).toEqual([]);
    expect(sweeper.name).toBe('qa-deadline');
  });
});
