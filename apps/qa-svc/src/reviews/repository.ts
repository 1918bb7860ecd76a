import type { AnnotatorId, ProjectId, ReviewerId, TaskId } from '@labelflow/contracts';
import { z } from 'zod';
import { keysetPage, keysetQuery, pgArray, TimestampKey, timestampKeySql, unnestColumns, type PoolClient, type Queryable } from '@labelflow/service-kit';
import { emptyState, type CloseReason, type Review, type ReviewStatus, type ReviewTaskState } from './state';

export interface ReviewRow {
  attempt: number;
  project_id: string;
  annotator_id: string;
  status: string;
  reviewer_id: string | null;
  reason: string | null;
  deadline_at: Date | null;
  close_reason: string | null;
  billed: boolean;
  opened_at: Date;
  decided_at: Date | null;
}
interface ReviewTaskRow {
  reopened_attempt: number;
  former_annotators: string[];
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
  billed: r.billed,
});

/** A review written again keeps its decision time unless its status changed; `billed` never goes back once set. */
const reviewUpsertSet = `status = EXCLUDED.status, reviewer_id = EXCLUDED.reviewer_id, reason = EXCLUDED.reason,
  deadline_at = EXCLUDED.deadline_at, close_reason = EXCLUDED.close_reason, billed = reviews.billed OR EXCLUDED.billed,
  decided_at = CASE WHEN EXCLUDED.status = 'pending' THEN NULL WHEN EXCLUDED.status = reviews.status THEN reviews.decided_at ELSE now() END`;

/**
 * Loads the task's state. With `lock`, first makes sure the task's row in review_tasks exists and
 * locks it: every writer of a task (reactions, decisions, the deadline sweeper) takes that one lock
 * first, so they serialize even before the task has a review, and never deadlock each other.
 */
export async function loadReviews(db: Queryable, taskId: TaskId, lock = true): Promise<ReviewTaskState> {
  const read = () => db.query<ReviewTaskRow>(`SELECT reopened_attempt, former_annotators, cancelled_at FROM review_tasks WHERE task_id = $1${lock ? ' FOR UPDATE' : ''}`, [taskId]);
  let task = await read();
  // A task this service has seen (every one a decision is made on) has its row: one statement.
  if (lock && task.rows.length === 0) {
    await db.query('INSERT INTO review_tasks (task_id) VALUES ($1) ON CONFLICT (task_id) DO NOTHING', [taskId]);
    task = await read();
  }
  const { rows } = await db.query<ReviewRow>('SELECT * FROM reviews WHERE task_id = $1 ORDER BY attempt', [taskId]);
  const row = task.rows[0];
  return { ...emptyState(taskId), reviews: rows.map(toReview), reopenedAttempt: row?.reopened_attempt ?? 0, formerAnnotators: (row?.former_annotators ?? []) as AnnotatorId[], cancelled: row?.cancelled_at != null };
}

/**
 * Loads a batch's tasks with one query per table, first making sure each has its review_tasks row
 * and locking those rows in task id order: the same lock every single-task writer takes.
 */
export async function loadReviewsForUpdate(tx: Queryable, taskIds: readonly TaskId[]): Promise<Map<string, ReviewTaskState>> {
  const ids = pgArray(taskIds);
  await tx.query('INSERT INTO review_tasks (task_id) SELECT unnest($1::text[]) ORDER BY 1 ON CONFLICT (task_id) DO NOTHING', [ids]);
  const tasks = await tx.query<ReviewTaskRow & { task_id: string }>('SELECT task_id, reopened_attempt, former_annotators, cancelled_at FROM review_tasks WHERE task_id = ANY($1::text[]) ORDER BY task_id FOR UPDATE', [ids]);
  const reviews = await tx.query<ReviewRow & { task_id: string }>('SELECT * FROM reviews WHERE task_id = ANY($1::text[]) ORDER BY task_id, attempt', [ids]);
  const states = new Map<string, ReviewTaskState>(taskIds.map((id) => [id, emptyState(id)]));
  for (const row of tasks.rows) states.set(row.task_id, { ...states.get(row.task_id)!, reopenedAttempt: row.reopened_attempt, formerAnnotators: row.former_annotators as AnnotatorId[], cancelled: row.cancelled_at != null });
  for (const row of reviews.rows) {
    const state = states.get(row.task_id)!;
    states.set(row.task_id, { ...state, reviews: [...state.reviews, toReview(row)] });
  }
  return states;
}

const taskRowChanged = (before: ReviewTaskState, after: ReviewTaskState): boolean =>
  after.reopenedAttempt !== before.reopenedAttempt || after.cancelled !== before.cancelled || after.formerAnnotators !== before.formerAnnotators;

/** Saves a batch's changed tasks: one update of their task rows, one upsert of their reviews. */
export async function saveReviewsMany(tx: Queryable, changes: readonly { readonly before: ReviewTaskState; readonly after: ReviewTaskState }[]): Promise<void> {
  const marks = changes.filter(({ before, after }) => taskRowChanged(before, after)).map(({ after }) => after);
  if (marks.length > 0) {
    // The former annotators go as one JSON array per task: unnest cannot take an array of arrays of different lengths.
    await tx.query(
      `UPDATE review_tasks t SET reopened_attempt = u.reopened_attempt, cancelled_at = CASE WHEN u.cancelled THEN coalesce(t.cancelled_at, now()) END,
         former_annotators = ARRAY(SELECT jsonb_array_elements_text(u.former::jsonb)), updated_at = now()
       FROM unnest($1::text[], $2::int[], $3::boolean[], $4::text[]) AS u(task_id, reopened_attempt, cancelled, former) WHERE t.task_id = ANY($1::text[]) AND t.task_id = u.task_id`,
      unnestColumns(marks.map((m) => [m.taskId, m.reopenedAttempt, m.cancelled, JSON.stringify(m.formerAnnotators)])),
    );
  }
  const changed = changes.flatMap(({ before, after }) => after.reviews.filter((r) => !before.reviews.includes(r)).map((review) => ({ taskId: after.taskId, review })));
  if (changed.length === 0) return;
  await tx.query(
    `INSERT INTO reviews (task_id, attempt, project_id, annotator_id, status, reviewer_id, reason, deadline_at, close_reason, billed)
     SELECT * FROM unnest($1::text[], $2::int[], $3::uuid[], $4::text[], $5::text[], $6::text[], $7::text[], $8::timestamptz[], $9::text[], $10::boolean[])
     ON CONFLICT (task_id, attempt) DO UPDATE SET ${reviewUpsertSet}`,
    unnestColumns(changed.map(({ taskId, review: r }) => [taskId, r.attempt, r.projectId, r.annotatorId, r.status, r.reviewerId, r.reason, r.deadlineAt, r.closeReason, r.billed])),
  );
}

/** Where a page of `pageReviewRows` ends; what a route decodes from its cursor and passes back as `after`. */
export const ReviewListPosition = z.object({ openedAt: TimestampKey, taskId: z.string().min(1).max(64), attempt: z.number().int().min(1).max(2_147_483_647) });
export type ReviewListPosition = z.infer<typeof ReviewListPosition>;

export type ReviewListRow = ReviewRow & { task_id: string; /** opened_at to the microsecond, for the next position. */ opened_at_key: string };

export interface ReviewListFilter {
  /** One task's reviews only (its history). */
  readonly taskId?: string;
  /** The projects the caller may see; an empty list matches nothing. */
  readonly projectIds: readonly string[] | 'all';
  /** One status or any of several; an empty list matches nothing. */
  readonly status?: readonly string[] | string;
  readonly limit: number;
  /** The `next` of the previous page: reviews strictly after it in (opened_at, task_id, attempt) order. */
  readonly after?: ReviewListPosition;
}

/**
 * A page of reviews in (opened_at, task_id, attempt) order; `next` is null exactly when no review
 * follows the page. Reviews upserted in one transaction share opened_at (now()), so the cursor
 * carries it to the microsecond plus the whole primary key. Each (project, status) pair of the
 * filter is read as its own ordered index range of at most limit + 1 rows and the ranges merged:
 * `project_id = ANY(...)` would instead read every remaining review of those projects and sort them.
 */
export async function pageReviewRows(db: Queryable, filter: ReviewListFilter): Promise<{ items: ReviewListRow[]; next: ReviewListPosition | null }> {
  const query = keysetQuery({
    table: 'reviews',
    select: `${timestampKeySql('reviews.opened_at')} AS opened_at_key`,
    order: [{ column: 'opened_at', type: 'timestamptz' }, { column: 'task_id', type: 'text' }, { column: 'attempt', type: 'int' }],
    partitions: [
      { column: 'project_id', type: 'uuid', values: filter.projectIds === 'all' ? undefined : filter.projectIds },
      { column: 'status', type: 'text', values: typeof filter.status === 'string' ? [filter.status] : filter.status },
    ],
    ...(filter.taskId !== undefined ? { equals: [{ column: 'task_id', value: filter.taskId }] } : {}),
    ...(filter.after ? { after: [filter.after.openedAt, filter.after.taskId, filter.after.attempt] } : {}),
    limit: filter.limit,
  });
  if (!query) return { items: [], next: null };
  const { rows } = await db.query<ReviewListRow>(query.text, query.values);
  return keysetPage(rows, filter.limit, (last) => ({ openedAt: last.opened_at_key, taskId: last.task_id, attempt: last.attempt }));
}

/**
 * The first `limit` reviews of `pageReviewRows`' order, without a next position: a task's history
 * (`{ taskId, limit: 1000 }`). Every project unless `projectIds` says otherwise.
 */
export async function listReviewRows(db: Queryable, filter: Omit<ReviewListFilter, 'projectIds'> & { readonly projectIds?: ReviewListFilter['projectIds'] }): Promise<ReviewListRow[]> {
  return (await pageReviewRows(db, { ...filter, projectIds: filter.projectIds ?? 'all' })).items;
}

/** The project of the task's newest review (the primary key's last row), or undefined before its first: what a request checks before it reads more. */
export async function reviewProjectOf(db: Queryable, taskId: string): Promise<ProjectId | undefined> {
  const { rows } = await db.query<{ project_id: string }>('SELECT project_id FROM reviews WHERE task_id = $1 ORDER BY attempt DESC LIMIT 1', [taskId]);
  return rows[0]?.project_id as ProjectId | undefined;
}

/** Whether the task was cancelled, for the views. */
export async function isCancelled(db: Queryable, taskId: string): Promise<boolean> {
  const { rows } = await db.query<{ cancelled_at: Date | null }>('SELECT cancelled_at FROM review_tasks WHERE task_id = $1', [taskId]);
  return rows[0]?.cancelled_at != null;
}

/** Saves what changed; the caller holds the task's row lock (taken by `loadReviews`). */
export async function saveReviews(tx: PoolClient, previous: ReviewTaskState, next: ReviewTaskState): Promise<void> {
  if (taskRowChanged(previous, next)) {
    await tx.query(
      `UPDATE review_tasks SET reopened_attempt = $2, cancelled_at = CASE WHEN $3::boolean THEN coalesce(cancelled_at, now()) END, former_annotators = $4::text[], updated_at = now() WHERE task_id = $1`,
      [next.taskId, next.reopenedAttempt, next.cancelled, pgArray(next.formerAnnotators)],
    );
  }
  for (const review of next.reviews) {
    if (previous.reviews.includes(review)) continue;
    await tx.query(
      `INSERT INTO reviews (task_id, attempt, project_id, annotator_id, status, reviewer_id, reason, deadline_at, close_reason, billed) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
       ON CONFLICT (task_id, attempt) DO UPDATE SET ${reviewUpsertSet}`,
      [next.taskId, review.attempt, review.projectId, review.annotatorId, review.status, review.reviewerId, review.reason, review.deadlineAt, review.closeReason, review.billed],
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
