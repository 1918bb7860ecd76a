import type { AnnotatorId, ProjectId, ReviewerId, TaskId } from '@labelflow/contracts';
import type { PoolClient, Queryable } from '@labelflow/service-kit';
import { emptyState, type CloseReason, type Review, type ReviewStatus, type ReviewTaskState } from './state';

interface ReviewRow {
  attempt: number;
  project_id: string;
  annotator_id: string;
  status: string;
  reviewer_id: string | null;
  reason: string | null;
  deadline_at: Date | null;
  close_reason: string | null;
  opened_at: Date;
  decided_at: Date | null;
}
interface ReviewTaskRow {
  reopened_attempt: number;
  cancelled_at: Date | null;
}

const toReview = (r: ReviewRow): Review => ({
  attempt: r.attempt,
  projectId: r.project_id as ProjectId,
  annotatorId: r.annotator_id as AnnotatorId,
  status: r.status as ReviewStatus,
  reviewerId: r.reviewer_id as ReviewerId | null,
  reason: r.reason,
  deadlineAt: r.deadline_at?.toISOString() ?? null,
  closeReason: r.close_reason as CloseReason | null,
});

/**
 * Loads the task's state. With `lock`, first makes sure the task's row in review_tasks exists and
 * locks it: every writer of a task (reactions, decisions, the deadline sweeper) takes that one lock
 * first, so they serialize even before the task has a review, and never deadlock each other.
 */
export async function loadReviews(db: Queryable, taskId: TaskId, lock = true): Promise<ReviewTaskState> {
  if (lock) await db.query('INSERT INTO review_tasks (task_id) VALUES ($1) ON CONFLICT (task_id) DO NOTHING', [taskId]);
  const task = await db.query<ReviewTaskRow>(`SELECT reopened_attempt, cancelled_at FROM review_tasks WHERE task_id = $1${lock ? ' FOR UPDATE' : ''}`, [taskId]);
  const { rows } = await db.query<ReviewRow>('SELECT * FROM reviews WHERE task_id = $1 ORDER BY attempt', [taskId]);
  const row = task.rows[0];
  return { ...emptyState(taskId), reviews: rows.map(toReview), reopenedAttempt: row?.reopened_attempt ?? 0, cancelled: row?.cancelled_at != null };
}

export async function listReviewRows(db: Queryable, filter: { taskId?: string; status?: string; limit: number }): Promise<(ReviewRow & { task_id: string })[]> {
  const { rows } = await db.query<ReviewRow & { task_id: string }>(
    `SELECT * FROM reviews WHERE ($1::text IS NULL OR task_id = $1) AND ($2::text IS NULL OR status = $2) ORDER BY opened_at, task_id, attempt LIMIT $3`,
    [filter.taskId ?? null, filter.status ?? null, filter.limit],
  );
  return rows;
}

/** Whether the task was cancelled, for the views. */
export async function isCancelled(db: Queryable, taskId: string): Promise<boolean> {
  const { rows } = await db.query<{ cancelled_at: Date | null }>('SELECT cancelled_at FROM review_tasks WHERE task_id = $1', [taskId]);
  return rows[0]?.cancelled_at != null;
}

/** Saves what changed; the caller holds the task's row lock (taken by `loadReviews`). */
export async function saveReviews(tx: PoolClient, previous: ReviewTaskState, next: ReviewTaskState): Promise<void> {
  if (next.reopenedAttempt !== previous.reopenedAttempt || next.cancelled !== previous.cancelled) {
    await tx.query(
      `UPDATE review_tasks SET reopened_attempt = $2, cancelled_at = CASE WHEN $3::boolean THEN coalesce(cancelled_at, now()) END, updated_at = now() WHERE task_id = $1`,
      [next.taskId, next.reopenedAttempt, next.cancelled],
    );
  }
  for (const review of next.reviews) {
    if (previous.reviews.includes(review)) continue;
    await tx.query(
      `INSERT INTO reviews (task_id, attempt, project_id, annotator_id, status, reviewer_id, reason, deadline_at, close_reason) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
       ON CONFLICT (task_id, attempt) DO UPDATE SET status = EXCLUDED.status, reviewer_id = EXCLUDED.reviewer_id, reason = EXCLUDED.reason,
         deadline_at = EXCLUDED.deadline_at, close_reason = EXCLUDED.close_reason,
         decided_at = CASE WHEN EXCLUDED.status = 'pending' THEN NULL WHEN EXCLUDED.status = reviews.status THEN reviews.decided_at ELSE now() END`,
      [next.taskId, review.attempt, review.projectId, review.annotatorId, review.status, review.reviewerId, review.reason, review.deadlineAt, review.closeReason],
    );
  }
}

/**
 * Locks up to `limit` tasks whose latest review is pending and past its deadline, oldest deadline
 * first. The lock is the task's review_tasks row, the same row every other writer locks first.
 */
export async function claimDueReviews(tx: Queryable, limit: number, now: Date): Promise<string[]> {
  const { rows } = await tx.query<{ task_id: string }>(
    `SELECT t.task_id FROM reviews r JOIN review_tasks t ON t.task_id = r.task_id
     WHERE r.status = 'pending' AND r.deadline_at <= $1
       AND NOT EXISTS (SELECT 1 FROM reviews later WHERE later.task_id = r.task_id AND later.attempt > r.attempt)
     ORDER BY r.deadline_at, r.task_id
     LIMIT $2
     FOR UPDATE OF t SKIP LOCKED`,
    [now, limit],
  );
  return rows.map((r) => r.task_id);
}
