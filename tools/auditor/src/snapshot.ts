import pg from 'pg';
import type { Queryable } from '@labelflow/plumbing';

/** What the auditor reads from each service's own database (read-only, plain rows). */
export interface Snapshot {
  /** `assignee`: who holds the task in task-svc (absent where the snapshot did not read it). */
  readonly tasks: readonly { taskId: string; projectId: string; status: string; attempt: number; assignee?: string | null; leaseExpiresAt: Date | null; updatedAt: Date }[];
  /** `annotatorId`: who labelled the attempt (a person, or a model's actor id); `voidReason`: why voided labels were. */
  readonly labels: readonly { taskId: string; attempt: number; status: string; annotatorId?: string; voidReason?: string | null }[];
  /** `cancelled`: label-svc recorded the task's cancellation (absent where the snapshot did not read it). */
  readonly assignments: readonly { taskId: string; attempt: number; annotatorId: string | null; cancelled?: boolean }[];
  /** `closeReason`: why a revoked or voided review was closed. */
  readonly reviews: readonly { taskId: string; attempt: number; status: string; deadlineAt: Date | null; closeReason?: string | null }[];
  /** qa-svc's per-task record (`review_tasks`): whether it recorded the cancellation, and the newest reopen it read (absent: not read). */
  readonly reviewTasks?: readonly { taskId: string; cancelled: boolean; reopenedAttempt?: number }[];
  /** billing-svc's per-task record (`billing_tasks`): the newest attempt it knows and whether it recorded the cancellation. */
  readonly billingTasks?: readonly { taskId: string; latestAttempt: number; cancelled: boolean }[];
  /** `machinePricePerTask`: what a task a model labelled costs (0 when absent). `currency`: of every amount of the project. */
  readonly projects: readonly { projectId: string; currency?: string; pricePerTask: number; machinePricePerTask?: number; balance: number }[];
  /** Who each billed attempt pays (billing-svc's `billings`): a model's id means the machine rule applies. */
  readonly billings?: readonly { taskId: string; attempt: number; annotatorId: string; status: string; approvedBy?: string | null }[];
  readonly ledger: readonly { projectId: string; taskId: string | null; attempt: number | null; kind: string; annotatorId: string | null; amount: number }[];
  /** One row per annotator and currency (a snapshot without currencies counts every payout in one). */
  readonly payouts: readonly { annotatorId: string; currency?: string; balance: number }[];
  /**
   * Outbox rows not published: waiting for the relay, or parked by it (`parkedAt`, the row's
   * `failed_at`, with its `failure`), which only an operator's release publishes.
   */
  readonly unpublished: readonly { service: string; id: string; eventType: string; createdAt: Date; parkedAt?: Date | null; failure?: string | null }[];
}

/** pg's `query`: a `pg.Client`, a `pg.PoolClient` and a `pg.Pool` all have it. */
export type { Queryable };

/** A connection a pool lent, given back when the database has been read. */
interface Connection extends Queryable {
  release(error?: Error | boolean): void;
}

/**
 * One service's database: a pool (`pg.Pool`, or anything whose `connect()` lends a connection with
 * `query()` and `release()`), from which the audit borrows one connection, or one connection (a
 * `pg.Client`, connected, or a client a pool lent) that nothing else uses while the audit reads it.
 */
export interface Db extends Queryable {
  connect?(): Promise<unknown>;
}

export interface Sources {
  readonly task: Db;
  readonly label: Db;
  readonly qa: Db;
  readonly billing: Db;
}

type Service = keyof Sources;
type Read = <R>(sql: string) => Promise<R[]>;

/**
 * One database read as of one instant: a READ ONLY transaction at REPEATABLE READ on one connection.
 * All its reads see the same committed state, so a transaction the service commits meanwhile is
 * either wholly in the snapshot or wholly out of it: a top-up's ledger row never without its
 * balance, a debit never without its credit.
 */
async function openSnapshot(db: Db): Promise<{ read: Read; close(): Promise<void> }> {
  if (db instanceof pg.Client && db.getTransactionStatus() === 'T') return joinSnapshot(db);
  const conn = await borrow(db);
  try {
    await conn.query('BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY');
    // PostgreSQL takes the snapshot at the first statement after BEGIN: take it now, so the
    // databases are read as of nearly the same moment, whatever order the reads then run in.
    await conn.query('SELECT 1');
  } catch (error) {
    conn.release(error instanceof Error ? error : true);
    throw error;
  }
  return {
    read: async <R>(sql: string) => (await conn.query(sql)).rows as R[],
    async close() {
      try {
        // Read only: there is nothing to commit.
        await conn.query('ROLLBACK');
      } catch (error) {
        // A connection that cannot even roll back is not given back to the pool for reuse.
        conn.release(error instanceof Error ? error : true);
        throw error;
      }
      conn.release();
    },
  };
}

/**
 * A connection given inside a transaction its caller opened: the caller owns that transaction and
 * ends it. Its reads share one snapshot only at REPEATABLE READ or SERIALIZABLE, so a READ
 * COMMITTED one is refused rather than read torn.
 */
async function joinSnapshot(client: pg.Client): Promise<{ read: Read; close(): Promise<void> }> {
  const { rows } = await client.query<{ transaction_isolation: string }>('SHOW transaction_isolation');
  const isolation = rows[0]?.transaction_isolation;
  if (isolation !== 'repeatable read' && isolation !== 'serializable') {
    throw new Error(`a connection given inside a ${isolation} transaction cannot be read in one snapshot: give it outside any transaction, or inside a REPEATABLE READ one`);
  }
  return { read: async <R>(sql: string) => (await client.query(sql)).rows as R[], close: async () => undefined };
}

/** One connection of `db`: borrowed from a pool, or `db` itself when it is one (its `connect()` would open it). */
async function borrow(db: Db): Promise<Connection> {
  if (db instanceof pg.Client || typeof db.connect !== 'function') return { query: (text) => db.query(text), release: () => undefined };
  const lent = await db.connect();
  if (!isConnection(lent)) throw new Error(`a database source's connect() must lend a connection with query() and release(), as pg.Pool's does`);
  return lent;
}

const isConnection = (c: unknown): c is Connection =>
  typeof c === 'object' && c !== null && typeof (c as Partial<Connection>).query === 'function' && typeof (c as Partial<Connection>).release === 'function';

/** Closes every snapshot, even when one fails; the first failure is thrown once all are closed. */
async function closeAll(snapshots: readonly { close(): Promise<void> }[]): Promise<void> {
  const failed = (await Promise.allSettled(snapshots.map((s) => s.close()))).find((c): c is PromiseRejectedResult => c.status === 'rejected');
  if (failed) throw failed.reason;
}

/**
 * Reads everything the invariants need, each database in one snapshot (`openSnapshot`). The four
 * snapshots are taken together, but they are four instants, a few milliseconds apart, and
 * the saga moves between the services through Kafka anyway: the per-task invariants give a task
 * whose last change is younger than `settleMs` time instead of judging it (`checkInvariants`).
 * Within one database nothing is torn: the money invariants (budget and payout balances against the
 * ledger) hold exactly at every instant, so they are checked without a settle window.
 *
 * A source given for two services (one database holding both) is read in one snapshot.
 */
export async function takeSnapshot(src: Sources): Promise<Snapshot> {
  const services = ['task', 'label', 'qa', 'billing'] as const satisfies readonly Service[];
  const distinct = [...new Set(services.map((s) => src[s]))];
  const opened = await Promise.allSettled(distinct.map(openSnapshot));
  const snapshots = opened.flatMap((o) => (o.status === 'fulfilled' ? [o.value] : []));
  const failedToOpen = opened.find((o): o is PromiseRejectedResult => o.status === 'rejected');
  if (failedToOpen) {
    await closeAll(snapshots).catch(() => undefined);
    throw failedToOpen.reason;
  }
  const of = (service: Service): Read => {
    const snapshot = snapshots[distinct.indexOf(src[service])];
    if (!snapshot) throw new Error(`no snapshot of the ${service} database`);
    return snapshot.read;
  };
  let snapshot: Snapshot;
  try {
    snapshot = await readAll(of);
  } catch (error) {
    await closeAll(snapshots).catch(() => undefined);
    throw error;
  }
  await closeAll(snapshots);
  return snapshot;
}

/** Each database's reads run one after the other on its connection; the databases in parallel. */
async function readAll(of: (service: Service) => Read): Promise<Snapshot> {
  const outbox = (service: Service) =>
    of(service)<{ id: string; event_type: string; created_at: Date; failed_at: Date | null; failure: string | null }>(`SELECT o.id, o.event_type, o.created_at, o.failed_at, o.failure FROM outbox_pending p CROSS JOIN LATERAL (SELECT * FROM outbox WHERE outbox.id = p.id OFFSET 0) o
       UNION ALL SELECT id, event_type, created_at, failed_at, failure FROM outbox o WHERE failed_at IS NOT NULL AND NOT EXISTS (SELECT 1 FROM outbox_pending p WHERE p.id = o.id)`).then((r) =>
      r.map((o) => ({ service: `${service}-svc`, id: o.id, eventType: o.event_type, createdAt: o.created_at, parkedAt: o.failed_at, failure: o.failure })),
    );
  const [task, label, qa, billing] = await Promise.all([
    (async () => {
      const tasks = await of('task')<{ task_id: string; project_id: string; status: string; attempt: number; assignee: string | null; lease_expires_at: Date | null; updated_at: Date }>(
        'SELECT task_id, project_id, status, attempt, assignee, lease_expires_at, updated_at FROM tasks',
      );
      return { tasks, unpublished: await outbox('task') };
    })(),
    (async () => {
      const labels = await of('label')<{ task_id: string; attempt: number; status: string; annotator_id: string; void_reason: string | null }>('SELECT task_id, attempt, status, annotator_id, void_reason FROM labels');
      const assignments = await of('label')<{ task_id: string; attempt: number; annotator_id: string | null; cancelled: boolean }>('SELECT task_id, attempt, annotator_id, cancelled_at IS NOT NULL AS cancelled FROM assignments');
      return { labels, assignments, unpublished: await outbox('label') };
    })(),
    (async () => {
      const reviews = await of('qa')<{ task_id: string; attempt: number; status: string; deadline_at: Date | null; close_reason: string | null }>('SELECT task_id, attempt, status, deadline_at, close_reason FROM reviews');
      const reviewTasks = await of('qa')<{ task_id: string; cancelled: boolean; reopened_attempt: number }>('SELECT task_id, cancelled_at IS NOT NULL AS cancelled, reopened_attempt FROM review_tasks');
      return { reviews, reviewTasks, unpublished: await outbox('qa') };
    })(),
    (async () => {
      const projects = await of('billing')<{ project_id: string; currency: string; price_per_task: string; machine_price_per_task: string; balance: string }>(
        'SELECT project_id, currency, price_per_task, machine_price_per_task, balance FROM projects',
      );
      // to_jsonb: a billing database from before approvers were kept (billing-svc migration 6) reads as none.
      const billings = await of('billing')<{ task_id: string; attempt: number; annotator_id: string; status: string; approved_by: string | null }>(
        "SELECT task_id, attempt, annotator_id, status, to_jsonb(b) ->> 'approved_by' AS approved_by FROM billings b",
      );
      const ledger = await of('billing')<{ project_id: string; task_id: string | null; attempt: number | null; kind: string; annotator_id: string | null; amount: string }>(
        'SELECT project_id, task_id, attempt, kind, annotator_id, amount FROM ledger',
      );
      // to_jsonb: a billing database from before payouts had a currency (billing-svc migration 9) reads as one currency.
      const payouts = await of('billing')<{ annotator_id: string; currency: string | null; balance: string }>("SELECT annotator_id, to_jsonb(p) ->> 'currency' AS currency, balance FROM payouts p");
      const billingTasks = await of('billing')<{ task_id: string; latest_attempt: number; cancelled: boolean }>('SELECT task_id, latest_attempt, cancelled_at IS NOT NULL AS cancelled FROM billing_tasks');
      return { projects, billings, ledger, payouts, billingTasks, unpublished: await outbox('billing') };
    })(),
  ]);
  return {
    tasks: task.tasks.map((t) => ({ taskId: t.task_id, projectId: t.project_id, status: t.status, attempt: t.attempt, assignee: t.assignee, leaseExpiresAt: t.lease_expires_at, updatedAt: t.updated_at })),
    labels: label.labels.map((l) => ({ taskId: l.task_id, attempt: l.attempt, status: l.status, annotatorId: l.annotator_id, voidReason: l.void_reason })),
    assignments: label.assignments.map((a) => ({ taskId: a.task_id, attempt: a.attempt, annotatorId: a.annotator_id, cancelled: a.cancelled })),
    reviews: qa.reviews.map((r) => ({ taskId: r.task_id, attempt: r.attempt, status: r.status, deadlineAt: r.deadline_at, closeReason: r.close_reason })),
    reviewTasks: qa.reviewTasks.map((r) => ({ taskId: r.task_id, cancelled: r.cancelled, reopenedAttempt: r.reopened_attempt })),
    billingTasks: billing.billingTasks.map((b) => ({ taskId: b.task_id, latestAttempt: b.latest_attempt, cancelled: b.cancelled })),
    projects: billing.projects.map((p) => ({ projectId: p.project_id, currency: p.currency, pricePerTask: Number(p.price_per_task), machinePricePerTask: Number(p.machine_price_per_task), balance: Number(p.balance) })),
    billings: billing.billings.map((b) => ({ taskId: b.task_id, attempt: b.attempt, annotatorId: b.annotator_id, status: b.status, approvedBy: b.approved_by })),
    ledger: billing.ledger.map((e) => ({ projectId: e.project_id, taskId: e.task_id, attempt: e.attempt, kind: e.kind, annotatorId: e.annotator_id, amount: Number(e.amount) })),
    payouts: billing.payouts.map((p) => ({ annotatorId: p.annotator_id, ...(p.currency === null ? {} : { currency: p.currency }), balance: Number(p.balance) })),
    unpublished: [...task.unpublished, ...label.unpublished, ...qa.unpublished, ...billing.unpublished],
  };
}
