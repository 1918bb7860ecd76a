import type pg from 'pg';

type Db = Pick<pg.Pool, 'query'>;

/** What the auditor reads from each service's own database (read-only, plain rows). */
export interface Snapshot {
  readonly tasks: readonly { taskId: string; projectId: string; status: string; attempt: number; leaseExpiresAt: Date | null; updatedAt: Date }[];
  readonly labels: readonly { taskId: string; attempt: number; status: string }[];
  readonly assignments: readonly { taskId: string; attempt: number; annotatorId: string | null }[];
  readonly reviews: readonly { taskId: string; attempt: number; status: string; deadlineAt: Date | null }[];
  readonly projects: readonly { projectId: string; pricePerTask: number; balance: number }[];
  readonly ledger: readonly { projectId: string; taskId: string | null; attempt: number | null; kind: string; annotatorId: string | null; amount: number }[];
  readonly payouts: readonly { annotatorId: string; balance: number }[];
  readonly unpublished: readonly { service: string; id: string; eventType: string; createdAt: Date }[];
}

export interface Sources {
  readonly task: Db;
  readonly label: Db;
  readonly qa: Db;
  readonly billing: Db;
}

const rows = async <R extends Record<string, unknown>>(db: Db, sql: string): Promise<R[]> => (await db.query<R>(sql)).rows;

/**
 * Reads everything the invariants need. The services keep running meanwhile, so the snapshot is
 * not one instant: the invariants give in-flight work a grace period instead of demanding one.
 */
export async function takeSnapshot(src: Sources): Promise<Snapshot> {
  const [tasks, labels, assignments, reviews, projects, ledger, payouts, ...outboxes] = await Promise.all([
    rows<{ task_id: string; project_id: string; status: string; attempt: number; lease_expires_at: Date | null; updated_at: Date }>(src.task, 'SELECT task_id, project_id, status, attempt, lease_expires_at, updated_at FROM tasks'),
    rows<{ task_id: string; attempt: number; status: string }>(src.label, 'SELECT task_id, attempt, status FROM labels'),
    rows<{ task_id: string; attempt: number; annotator_id: string | null }>(src.label, 'SELECT task_id, attempt, annotator_id FROM assignments'),
    rows<{ task_id: string; attempt: number; status: string; deadline_at: Date | null }>(src.qa, 'SELECT task_id, attempt, status, deadline_at FROM reviews'),
    rows<{ project_id: string; price_per_task: string; balance: string }>(src.billing, 'SELECT project_id, price_per_task, balance FROM projects'),
    rows<{ project_id: string; task_id: string | null; attempt: number | null; kind: string; annotator_id: string | null; amount: string }>(src.billing, 'SELECT project_id, task_id, attempt, kind, annotator_id, amount FROM ledger'),
    rows<{ annotator_id: string; balance: string }>(src.billing, 'SELECT annotator_id, balance FROM payouts'),
    ...(['task', 'label', 'qa', 'billing'] as const).map((service) =>
      rows<{ id: string; event_type: string; created_at: Date }>(src[service], 'SELECT id, event_type, created_at FROM outbox WHERE published_at IS NULL').then((r) =>
        r.map((o) => ({ service: `${service}-svc`, id: o.id, eventType: o.event_type, createdAt: o.created_at })),
      ),
    ),
  ]);
  return {
    tasks: tasks.map((t) => ({ taskId: t.task_id, projectId: t.project_id, status: t.status, attempt: t.attempt, leaseExpiresAt: t.lease_expires_at, updatedAt: t.updated_at })),
    labels: labels.map((l) => ({ taskId: l.task_id, attempt: l.attempt, status: l.status })),
    assignments: assignments.map((a) => ({ taskId: a.task_id, attempt: a.attempt, annotatorId: a.annotator_id })),
    reviews: reviews.map((r) => ({ taskId: r.task_id, attempt: r.attempt, status: r.status, deadlineAt: r.deadline_at })),
    projects: projects.map((p) => ({ projectId: p.project_id, pricePerTask: Number(p.price_per_task), balance: Number(p.balance) })),
    ledger: ledger.map((e) => ({ projectId: e.project_id, taskId: e.task_id, attempt: e.attempt, kind: e.kind, annotatorId: e.annotator_id, amount: Number(e.amount) })),
    payouts: payouts.map((p) => ({ annotatorId: p.annotator_id, balance: Number(p.balance) })),
    unpublished: outboxes.flat(),
  };
}
