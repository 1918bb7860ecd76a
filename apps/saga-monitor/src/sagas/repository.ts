import type { DomainEvent } from '@labelflow/contracts';
import { pgArray, unnestColumns, type PoolClient, type Queryable } from '@labelflow/service-kit';
import type { Outcome } from './latency';
import type { Notice, NoticeKind, SagaRecord, SagaRow } from './record';
import { emptyWatchState, seenKey, type Watch, type WatchedStep } from './state';

interface SagaDbRow {
  task_id: string;
  project_id: string;
  task_number: string | null;
  title: string | null;
  attempt: number;
  last_event_type: string;
  outcome: string | null;
  first_event_at: Date;
  last_event_at: Date;
  events: number;
  duplicates_dropped: number;
}

interface WatchDbRow {
  task_id: string;
  step: string;
  attempt: number;
  since: Date;
  due_at: Date;
  alerted_at: Date | null;
}

const toRow = (r: SagaDbRow): SagaRow => ({
  taskId: r.task_id,
  projectId: r.project_id,
  taskNumber: r.task_number,
  title: r.title,
  attempt: r.attempt,
  lastEventType: r.last_event_type,
  outcome: r.outcome as Outcome | null,
  firstEventAt: r.first_event_at.toISOString(),
  lastEventAt: r.last_event_at.toISOString(),
  events: r.events,
});

const toWatch = (r: WatchDbRow): Watch => ({
  step: r.step as WatchedStep,
  attempt: r.attempt,
  since: r.since.toISOString(),
  dueAt: r.due_at.toISOString(),
  alertedAt: r.alerted_at?.toISOString() ?? null,
});

/**
 * Loads and locks the records of a batch's tasks, in task id order. A task seen for the first time
 * gets its row first (from its first event in the batch): every writer of a task (the consumer's
 * batches from four topics, the alert sweeper) takes that row's lock before anything else.
 */
export async function loadSagasForUpdate(tx: Queryable, taskIds: readonly string[], events: readonly DomainEvent[]): Promise<Map<string, SagaRecord>> {
  const first = new Map<string, DomainEvent>();
  for (const e of events) if (!first.has(e.taskId)) first.set(e.taskId, e);
  const fresh = [...first.values()].sort((a, b) => (a.taskId < b.taskId ? -1 : 1));
  if (fresh.length > 0) {
    await tx.query(
      `INSERT INTO sagas (task_id, project_id, attempt, last_event_type, first_event_at, last_event_at)
       SELECT * FROM unnest($1::text[], $2::uuid[], $3::int[], $4::text[], $5::timestamptz[], $5::timestamptz[]) ORDER BY 1
       ON CONFLICT (task_id) DO NOTHING`,
      unnestColumns(fresh.map((e) => [e.taskId, e.projectId, e.attempt, e.type, e.occurredAt])),
    );
  }
  const sagas = await tx.query<SagaDbRow>('SELECT * FROM sagas WHERE task_id = ANY($1::text[]) ORDER BY task_id FOR UPDATE', [pgArray(taskIds)]);
  const seen = await tx.query<{ task_id: string; type: string; attempt: number; at: Date }>(
    'SELECT task_id, type, attempt, min(occurred_at) AS at FROM saga_events WHERE task_id = ANY($1::text[]) GROUP BY task_id, type, attempt',
    [pgArray(taskIds)],
  );
  const watches = await tx.query<WatchDbRow>('SELECT * FROM saga_watches WHERE task_id = ANY($1::text[]) ORDER BY task_id, since', [pgArray(taskIds)]);
  // Grouped by task once: filtering every row for every task was quadratic in the batch (a batch of
  // 500 tasks with a dozen events each is 6,000 rows, scanned 500 times).
  const seenOf = groupBy(seen.rows, (s) => s.task_id);
  const watchesOf = groupBy(watches.rows, (w) => w.task_id);
  const records = new Map<string, SagaRecord>();
  for (const r of sagas.rows) {
    const own = seenOf.get(r.task_id) ?? [];
    const reopened = own.filter((s) => s.type === 'TaskReopened').map((s) => s.attempt);
    records.set(r.task_id, {
      row: toRow(r),
      watch: {
        ...emptyWatchState,
        seen: Object.fromEntries(own.map((s) => [seenKey(s.type as DomainEvent['type'], s.attempt), s.at.toISOString()])),
        watches: (watchesOf.get(r.task_id) ?? []).map(toWatch),
        reopenedAttempt: Math.max(0, ...reopened),
        cancelled: own.some((s) => s.type === 'TaskCancelled'),
      },
      recorded: [],
      notices: [],
    });
  }
  return records;
}

function groupBy<T>(rows: readonly T[], keyOf: (row: T) => string): Map<string, T[]> {
  const groups = new Map<string, T[]>();
  for (const row of rows) {
    const key = keyOf(row);
    const group = groups.get(key);
    if (group) group.push(row);
    else groups.set(key, [row]);
  }
  return groups;
}

/** Loads and locks one task's record (the sweeper, after its claim); undefined when the monitor never saw the task. */
export async function loadSagaForUpdate(tx: Queryable, taskId: string): Promise<SagaRecord | undefined> {
  return (await loadSagasForUpdate(tx, [taskId], [])).get(taskId);
}

const json = (value: unknown) => JSON.stringify(value);

/** Writes what a batch changed: rows, new events (idempotent on the event id), watches and notices. */
export async function saveSagasMany(tx: Queryable, changes: readonly { readonly before: SagaRecord; readonly after: SagaRecord }[]): Promise<void> {
  const rows = changes.filter(({ before, after }) => before.row !== after.row).map(({ after }) => after.row);
  if (rows.length > 0) {
    await tx.query(
      `UPDATE sagas s SET task_number = u.task_number, title = u.title, attempt = u.attempt, last_event_type = u.last_event_type, outcome = u.outcome,
         first_event_at = u.first_event_at, last_event_at = u.last_event_at, events = u.events, updated_at = now()
       FROM jsonb_to_recordset($1::jsonb) AS u(task_id text, task_number text, title text, attempt int, last_event_type text, outcome text, first_event_at timestamptz, last_event_at timestamptz, events int)
       WHERE s.task_id = ANY($2::text[]) AND s.task_id = u.task_id`,
      [
        json(rows.map((r) => ({ task_id: r.taskId, task_number: r.taskNumber, title: r.title, attempt: r.attempt, last_event_type: r.lastEventType, outcome: r.outcome, first_event_at: r.firstEventAt, last_event_at: r.lastEventAt, events: r.events }))),
        pgArray(rows.map((r) => r.taskId)),
      ],
    );
  }
  const recorded = changes.flatMap(({ before, after }) => after.recorded.slice(before.recorded.length));
  if (recorded.length > 0) {
    await tx.query(
      `INSERT INTO saga_events (event_id, task_id, project_id, type, version, attempt, producer, occurred_at, consumed_at, trace_id, causation_id, payload)
       SELECT * FROM jsonb_to_recordset($1::jsonb) AS e(event_id text, task_id text, project_id uuid, type text, version int, attempt int, producer text,
         occurred_at timestamptz, consumed_at timestamptz, trace_id text, causation_id text, payload jsonb)
       ON CONFLICT (event_id) DO NOTHING`,
      [json(recorded.map((e) => ({ event_id: e.eventId, task_id: e.taskId, project_id: e.projectId, type: e.type, version: e.version, attempt: e.attempt, producer: e.producer, occurred_at: e.occurredAt, consumed_at: e.consumedAt, trace_id: e.traceId, causation_id: e.causationId, payload: e.payload })))],
    );
  }
  await saveWatches(tx, changes);
  const notices = changes.flatMap(({ before, after }) => after.notices.slice(before.notices.length));
  if (notices.length > 0) {
    await tx.query('INSERT INTO saga_notices (kind, body) SELECT kind, body FROM jsonb_to_recordset($1::jsonb) AS n(kind text, body jsonb)', [json(notices)]);
  }
}

const watchKey = (taskId: string, w: Watch) => `${taskId}/${w.step}/${w.attempt}`;

async function saveWatches(tx: Queryable, changes: readonly { readonly before: SagaRecord; readonly after: SagaRecord }[]): Promise<void> {
  const gone: { task_id: string; step: string; attempt: number }[] = [];
  const written: { task_id: string; step: string; attempt: number; since: string; due_at: string; alerted_at: string | null }[] = [];
  for (const { before, after } of changes) {
    if (before.watch.watches === after.watch.watches) continue;
    const taskId = after.row.taskId;
    const now = new Map(after.watch.watches.map((w) => [watchKey(taskId, w), w]));
    for (const w of before.watch.watches) if (!now.has(watchKey(taskId, w))) gone.push({ task_id: taskId, step: w.step, attempt: w.attempt });
    for (const w of after.watch.watches) {
      if (before.watch.watches.includes(w)) continue;
      written.push({ task_id: taskId, step: w.step, attempt: w.attempt, since: w.since, due_at: w.dueAt, alerted_at: w.alertedAt });
    }
  }
  if (gone.length > 0) {
    await tx.query(
      `DELETE FROM saga_watches w USING jsonb_to_recordset($1::jsonb) AS g(task_id text, step text, attempt int)
       WHERE w.task_id = ANY($2::text[]) AND w.task_id = g.task_id AND w.step = g.step AND w.attempt = g.attempt`,
      [json(gone), pgArray(gone.map((g) => g.task_id))],
    );
  }
  if (written.length > 0) {
    await tx.query(
      `INSERT INTO saga_watches (task_id, step, attempt, since, due_at, alerted_at)
       SELECT * FROM jsonb_to_recordset($1::jsonb) AS w(task_id text, step text, attempt int, since timestamptz, due_at timestamptz, alerted_at timestamptz)
       ON CONFLICT (task_id, step, attempt) DO UPDATE SET since = EXCLUDED.since, due_at = EXCLUDED.due_at, alerted_at = EXCLUDED.alerted_at`,
      [json(written)],
    );
  }
}

/**
 * Locks up to `limit` tasks with a step due by `now` and not alerted yet, skipping tasks another
 * transaction holds: the lock is the task's row, the one every writer of the task takes first.
 */
export async function claimDueSagas(tx: PoolClient, limit: number, now: Date): Promise<string[]> {
  const { rows } = await tx.query<{ task_id: string }>(
    `SELECT s.task_id FROM sagas s
     WHERE s.task_id IN (SELECT w.task_id FROM saga_watches w WHERE w.alerted_at IS NULL AND w.due_at <= $1 ORDER BY w.due_at LIMIT $2)
     ORDER BY s.task_id FOR UPDATE OF s SKIP LOCKED`,
    [now, limit],
  );
  return rows.map((r) => r.task_id);
}

/** Adds duplicates the consumer dropped to their tasks' counters (outside any batch: best effort). */
export async function addDuplicatesDropped(db: Queryable, counts: ReadonlyMap<string, number>): Promise<void> {
  if (counts.size === 0) return;
  await db.query(
    `UPDATE sagas s SET duplicates_dropped = s.duplicates_dropped + d.n FROM unnest($1::text[], $2::int[]) AS d(task_id, n) WHERE s.task_id = ANY($1::text[]) AND s.task_id = d.task_id`,
    unnestColumns([...counts].map(([taskId, n]) => [taskId, n])),
  );
}

/**
 * Takes up to `limit` notices, oldest first; they are gone once the caller's statement commits.
 * With `queueWebhooks`, the same statement queues each alert's and resolution's webhook post
 * (saga_webhooks), its notice id as the body's `id`: taken and queued together, or neither.
 */
export async function takeNotices(db: Queryable, limit: number, queueWebhooks = false): Promise<Notice[]> {
  const { rows } = await db.query<{ id: string; kind: NoticeKind; body: Record<string, unknown> }>(
    `WITH taken AS (
       DELETE FROM saga_notices WHERE id IN (SELECT id FROM saga_notices ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED) RETURNING id, kind, body
     ), queued AS (
       INSERT INTO saga_webhooks (id, alert_key, body)
       SELECT id, jsonb_build_array(body->'taskId', body->'step', body->'attempt')::text,
              body || jsonb_build_object('status', CASE kind WHEN 'alert' THEN 'firing' ELSE 'resolved' END, 'id', id::text)
         FROM taken WHERE $2::boolean AND kind IN ('alert', 'resolved')
       ON CONFLICT (id) DO NOTHING
     )
     SELECT id, kind, body FROM taken`,
    [limit, queueWebhooks],
  );
  return rows.sort((a, b) => Number(a.id) - Number(b.id)).map((r) => ({ kind: r.kind, body: r.body }));
}

export interface QueuedWebhook {
  readonly id: string;
  readonly body: Readonly<Record<string, unknown>>;
}

/**
 * Leases up to `limit` queued posts for `leaseMs`, oldest first: each the oldest of its alert (so a
 * resolved waits for its firing to be gone), none another instance holds an unexpired lease on.
 */
export async function leaseWebhooks(db: Queryable, limit: number, leaseMs: number): Promise<QueuedWebhook[]> {
  const { rows } = await db.query<{ id: string; body: Record<string, unknown> }>(
    `UPDATE saga_webhooks w SET leased_until = now() + $2 * interval '1 millisecond'
      WHERE w.id IN (
        SELECT q.id FROM saga_webhooks q
         WHERE (q.leased_until IS NULL OR q.leased_until < now())
           AND NOT EXISTS (SELECT 1 FROM saga_webhooks e WHERE e.alert_key = q.alert_key AND e.id < q.id)
         ORDER BY q.id LIMIT $1 FOR UPDATE SKIP LOCKED)
      RETURNING w.id, w.body`,
    [limit, leaseMs],
  );
  return rows.sort((a, b) => Number(a.id) - Number(b.id)).map((r) => ({ id: r.id, body: r.body }));
}

/** Drops posts that were delivered or given up. */
export async function forgetWebhooks(db: Queryable, ids: readonly string[]): Promise<void> {
  if (ids.length > 0) await db.query('DELETE FROM saga_webhooks WHERE id = ANY($1::bigint[])', [pgArray(ids)]);
}

/** Hands leased posts back at once (the monitor closes before it could post them). */
export async function releaseWebhooks(db: Queryable, ids: readonly string[]): Promise<void> {
  if (ids.length > 0) await db.query('UPDATE saga_webhooks SET leased_until = NULL WHERE id = ANY($1::bigint[])', [pgArray(ids)]);
}

/** Alerting watches per step, across every instance: what `saga_alerts_active` shows. */
export async function activeAlertsByStep(db: Queryable): Promise<Map<string, number>> {
  const { rows } = await db.query<{ step: string; n: string }>('SELECT step, count(*) AS n FROM saga_watches WHERE alerted_at IS NOT NULL GROUP BY step');
  return new Map(rows.map((r) => [r.step, Number(r.n)]));
}

// Reads for the HTTP API.

export type SagaView = SagaRow & { readonly duplicatesDropped: number };

const toView = (r: SagaDbRow): SagaView => ({ ...toRow(r), duplicatesDropped: r.duplicates_dropped });

export async function findSaga(db: Queryable, taskId: string): Promise<SagaView | undefined> {
  const { rows } = await db.query<SagaDbRow>('SELECT * FROM sagas WHERE task_id = $1', [taskId]);
  return rows[0] ? toView(rows[0]) : undefined;
}

export interface EventDbRow {
  event_id: string;
  type: DomainEvent['type'];
  version: number;
  attempt: number;
  producer: string;
  occurred_at: Date;
  consumed_at: Date;
  trace_id: string | null;
  causation_id: string | null;
  payload: Record<string, unknown>;
}

/** The task's events in the order they happened (ties: by event id, which is time-ordered per producer). */
export async function sagaEvents(db: Queryable, taskId: string): Promise<EventDbRow[]> {
  const { rows } = await db.query<EventDbRow>(
    'SELECT event_id, type, version, attempt, producer, occurred_at, consumed_at, trace_id, causation_id, payload FROM saga_events WHERE task_id = $1 ORDER BY occurred_at, event_id',
    [taskId],
  );
  return rows;
}

export async function sagaWatches(db: Queryable, taskId: string): Promise<Watch[]> {
  const { rows } = await db.query<WatchDbRow>('SELECT * FROM saga_watches WHERE task_id = $1 ORDER BY since', [taskId]);
  return rows.map(toWatch);
}

/** Sagas by task id or task number (any case), newest activity first; without `search`, the latest ones. */
export async function searchSagas(db: Queryable, { search, projectIds, limit }: { readonly search?: string; readonly projectIds: readonly string[] | 'all'; readonly limit: number }): Promise<SagaView[]> {
  if (projectIds !== 'all' && projectIds.length === 0) return [];
  const where: string[] = [];
  const values: unknown[] = [];
  if (search !== undefined) {
    values.push(search);
    where.push(`(task_id = $${values.length} OR (task_number IS NOT NULL AND upper(task_number) = upper($${values.length})))`);
  }
  if (projectIds !== 'all') {
    values.push(projectIds);
    where.push(`project_id = ANY($${values.length}::uuid[])`);
  }
  values.push(limit);
  const { rows } = await db.query<SagaDbRow>(`SELECT * FROM sagas ${where.length > 0 ? `WHERE ${where.join(' AND ')}` : ''} ORDER BY last_event_at DESC, task_id LIMIT $${values.length}`, values);
  return rows.map(toView);
}

export type StuckRow = WatchDbRow & { project_id: string; task_number: string | null; title: string | null; last_event_type: string };

/** Steps past their deadline: alerting, or due and about to (the sweeper's clock waits for the consumer). */
export async function overdueWatches(db: Queryable, { projectIds, now, limit }: { readonly projectIds: readonly string[] | 'all'; readonly now: Date; readonly limit: number }): Promise<StuckRow[]> {
  if (projectIds !== 'all' && projectIds.length === 0) return [];
  const { rows } = await db.query<StuckRow>(
    `SELECT w.*, s.project_id, s.task_number, s.title, s.last_event_type FROM saga_watches w JOIN sagas s USING (task_id)
     WHERE (w.alerted_at IS NOT NULL OR w.due_at <= $1) ${projectIds === 'all' ? '' : 'AND s.project_id = ANY($3::uuid[])'}
     ORDER BY w.due_at LIMIT $2`,
    projectIds === 'all' ? [now, limit] : [now, limit, projectIds],
  );
  return rows;
}

export interface Pruned {
  readonly sagas: number;
  readonly deadLetters: number;
}

/**
 * Forgets up to `limit` sagas that ended before `cutoff` (their row, events and watches, in one
 * statement), and up to `limit` dead letters recorded before it. A saga still running is kept
 * however old, since a stuck one is what the monitor is for, and so is an ended one still waiting
 * for a step (a cancelled task's refund): forgetting it would drop its alert unresolved. Rows
 * another transaction holds are skipped: the consumer or the sweeper has the task, and the next
 * prune gets it.
 */
export async function pruneEndedSagas(db: Queryable, cutoff: Date, limit: number): Promise<Pruned> {
  const { rows } = await db.query<{ sagas: number; dead_letters: number }>(
    `WITH gone AS (
       SELECT task_id FROM sagas s WHERE outcome IS NOT NULL AND last_event_at < $1 AND NOT EXISTS (SELECT 1 FROM saga_watches w WHERE w.task_id = s.task_id)
       ORDER BY last_event_at LIMIT $2 FOR UPDATE SKIP LOCKED
     ), events AS (
       DELETE FROM saga_events e WHERE e.task_id IN (SELECT task_id FROM gone)
     ), watches AS (
       DELETE FROM saga_watches w WHERE w.task_id IN (SELECT task_id FROM gone)
     ), ended AS (
       DELETE FROM sagas s WHERE s.task_id IN (SELECT task_id FROM gone) RETURNING 1
     ), letters AS (
       DELETE FROM dead_letters d WHERE (d.topic, d.partition, d."offset") IN (
         SELECT topic, partition, "offset" FROM dead_letters WHERE recorded_at < $1 ORDER BY recorded_at LIMIT $2 FOR UPDATE SKIP LOCKED)
       RETURNING 1
     ), hooks AS (
       -- Posts queued while MONITOR_WEBHOOK_URL was set, and never posted since it was unset.
       DELETE FROM saga_webhooks WHERE created_at < $1
     )
     SELECT (SELECT count(*) FROM ended)::int AS sagas, (SELECT count(*) FROM letters)::int AS dead_letters`,
    [cutoff, limit],
  );
  return { sagas: rows[0]?.sagas ?? 0, deadLetters: rows[0]?.dead_letters ?? 0 };
}
