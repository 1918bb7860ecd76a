import { execFile } from 'node:child_process';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { formatReport, runAudit, type AuditReport } from '@labelflow/auditor';
import type { ServiceName } from '@labelflow/contracts';
import { eventually, produceRaw, queryRows, repoRoot, serviceNames, startStack, type TestStack } from '@labelflow/testing';
import { auditStack } from './audit';
import { claim, createProject, createTask, key, review, submitLabels, waitForStatus } from './saga';

const rows = <R extends Record<string, unknown>>(stack: TestStack, svc: ServiceName, sql: string, values: unknown[] = []) => queryRows<R>(stack.databases[svc], sql, values);
/** What the report blames: each violation as [invariant, task id, or project id for project-wide ones], sorted. */
const blamed = (report: AuditReport) => report.violations.map((v) => [v.invariant, v.taskId ?? v.projectId ?? null]).sort((a, b) => String(a).localeCompare(String(b)));

type Query = (text: string, values?: unknown[]) => Promise<pg.QueryResult>;

/**
 * A database whose reads of money (projects, ledger, payouts) let `between` run, and commit, after
 * the first of them has answered and before the second one runs: the interleaving a torn read
 * needs, made to happen instead of waited for. Every read goes to the real database, through the
 * pool or through a connection borrowed from it.
 */
function interleaving(pool: pg.Pool, between: () => Promise<void>) {
  const money = /\bFROM (projects|ledger|payouts)\b/;
  let first: Promise<unknown> | undefined;
  let moved: Promise<void> | undefined;
  const around =
    (query: Query): Query =>
    (text, values) => {
      if (!money.test(text)) return query(text, values);
      if (!first) return (first = query(text, values));
      moved ??= first.then(between);
      return moved.then(() => query(text, values));
    };
  return {
    query: around((text, values) => pool.query(text, values)),
    connect: async () => {
      const client = await pool.connect();
      return { query: around((text, values) => client.query(text, values)), release: (error?: Error | boolean) => client.release(error) };
    },
    /** Settles once `between` has run; undefined while the auditor has made fewer than two reads of money. */
    moved: () => moved,
  };
}

/** No consumer lag and no unpublished outbox row, twice in a row: every effect of every event is in. */

describe('the auditor catches planted corruption', () => {
  const infra = inject('infra');
  const brokers = infra.kafkaBrokers;
  const price = 100;
  let stack: TestStack;
  let projectId: string;
  let brokeProjectId: string;
  let completed: [string, string];
  let cancelled: string;
  let failed: string;
  let assigned: string;

  const audit = (options: { stuckMs?: number } = {}) => auditStack(stack, brokers, { settleMs: 0, ...options });
  const expectClean = async () => {
    const report = await audit();
    expect(report.violations, formatReport(report)).toEqual([]);
  };
  /** Plants corruption, checks what the auditor says about it, and repairs it again, whatever happened. */
  const planted = async (plant: () => Promise<void>, check: () => Promise<void>, repair: () => Promise<void>) => {
    await plant();
    try {
      await check();
    } finally {
      await repair();
    }
    await expectClean();
  };

  beforeAll(async () => {
    // A lease that ended less than an hour ago is not reopened yet: the stuck task planted below
    // stays stuck while the auditor looks, instead of being repaired by the lease sweeper.
    stack = await startStack(infra, { 'task-svc': { ASSIGNMENT_LEASE_GRACE_MS: '3600000' } });
    projectId = await createProject(stack, 10_000, price);
    brokeProjectId = await createProject(stack, 0, price);
    const [t1, t2, t3, t4, t5] = await Promise.all([
      createTask(stack, projectId, 'completed 1'),
      createTask(stack, projectId, 'completed 2'),
      createTask(stack, projectId, 'cancelled after completion'),
      createTask(stack, brokeProjectId, 'billing fails'),
      createTask(stack, projectId, 'assigned'),
    ]);
    completed = [t1, t2];
    cancelled = t3;
    failed = t4;
    assigned = t5;
    await Promise.all(
      [t1, t2, t3, t4].map(async (taskId, i) => {
        await claim(stack, taskId, `ann-${i}`);
        await submitLabels(stack, taskId, `ann-${i}`);
        await review(stack, taskId, 'approve');
      }),
    );
    await claim(stack, assigned, 'ann-slow');
    for (const taskId of [t1, t2, t3]) await waitForStatus(stack, taskId, 'completed');
    await waitForStatus(stack, failed, 'failed');
    const res = await stack.http('task-svc').post(`/tasks/${cancelled}/cancel`, { reason: 'customer withdrew the sample' });
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    await eventually(async () => {
      expect(await rows(stack, 'qa-svc', 'SELECT attempt, status, close_reason FROM reviews WHERE task_id = $1', [cancelled])).toEqual([{ attempt: 1, status: 'revoked', close_reason: 'CANCELLED' }]);
      expect(await rows(stack, 'label-svc', 'SELECT status FROM labels WHERE task_id = ANY($1) ORDER BY status', [[cancelled, failed]])).toEqual([{ status: 'voided' }, { status: 'voided' }]);
      expect((await rows(stack, 'billing-svc', 'SELECT kind FROM ledger WHERE task_id = $1', [cancelled])).map((r) => r.kind).sort()).toEqual(['credit', 'debit', 'refund', 'reversal']);
    });
    await stack.quiesce();
  });
  afterAll(async () => stack?.stop());

  it('finds every invariant holding after real sagas: completed, cancelled after completion, failed on an empty budget, and one in progress', async () => {
    const report = await audit();
    expect(report.violations, formatReport(report)).toEqual([]);
    expect(report.ok).toBe(true);
    expect(report.counts).toEqual({ tasks: 5, projects: 2, byStatus: { completed: 2, cancelled: 1, failed: 1, assigned: 1 } });
    expect(report.deadLetters).toEqual([]);
  });

  it('reads each database as of one instant: money that moves between its reads of the projects and of the ledger is no violation', async () => {
    const billing = stack.http('billing-svc');
    const before = (await billing.get<{ balance: number }>(`/projects/${projectId}`)).body.balance;
    // The writer is billing-svc itself: a top-up inserts its ledger row and raises the balance in one transaction.
    const topUp = async () => {
      const res = await billing.post(`/projects/${projectId}/top-ups`, { amount: 500 }, key());
      expect(res.status, JSON.stringify(res.body)).toBe(200);
    };
    const pools = serviceNames.map((name) => new pg.Pool({ connectionString: stack.databases[name], max: 2 }));
    const [task, label, qa, billingDb] = pools as [pg.Pool, pg.Pool, pg.Pool, pg.Pool];
    const torn = interleaving(billingDb, topUp);
    try {
      const report = await runAudit({ sources: { task, label, qa, billing: torn }, settleMs: 0, stuckMs: 60_000, outboxMs: 60_000 });
      // The top-up did commit between two of the auditor's reads of money.
      expect(torn.moved()).toBeInstanceOf(Promise);
      await torn.moved();
      expect(report.violations, formatReport(report)).toEqual([]);
    } finally {
      await Promise.all(pools.map((p) => p.end()));
    }
    expect((await billing.get<{ balance: number }>(`/projects/${projectId}`)).body.balance).toBe(before + 500);
    await expectClean();
  });

  it('reads connections it is given as they are: inside the caller\'s REPEATABLE READ transaction, which it leaves open, never inside a READ COMMITTED one, and otherwise in a transaction of its own', async () => {
    const clients = serviceNames.map((name) => new pg.Client({ connectionString: stack.databases[name] }));
    await Promise.all(clients.map((c) => c.connect()));
    const [task, label, qa, billing] = clients as [pg.Client, pg.Client, pg.Client, pg.Client];
    const audit = () => runAudit({ sources: { task, label, qa, billing }, settleMs: 0, stuckMs: 60_000, outboxMs: 60_000 });
    const statuses = () => clients.map((c) => c.getTransactionStatus());
    try {
      await Promise.all(clients.map((c) => c.query('BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY')));
      const inCallers = await audit();
      expect(inCallers.violations, formatReport(inCallers)).toEqual([]);
      expect(statuses()).toEqual(['T', 'T', 'T', 'T']);
      await Promise.all(clients.map((c) => c.query('COMMIT')));

      await billing.query('BEGIN ISOLATION LEVEL READ COMMITTED');
      await expect(audit()).rejects.toThrow('a connection given inside a read committed transaction cannot be read in one snapshot');
      await billing.query('ROLLBACK');

      const ownTransaction = await audit();
      expect(ownTransaction.violations, formatReport(ownTransaction)).toEqual([]);
      expect(ownTransaction.counts.tasks).toBe(5);
      expect(statuses()).toEqual(['I', 'I', 'I', 'I']);
    } finally {
      await Promise.all(clients.map((c) => c.end()));
    }
  });

  it('reports a completed task debited twice as BILLED_ONCE, and nothing else while the balance agrees with the ledger', async () => {
    const [taskId] = completed;
    await planted(
      async () => {
        await rows(stack, 'billing-svc', `INSERT INTO ledger (project_id, task_id, attempt, kind, amount) VALUES ($1, $2, 99, 'debit', $3)`, [projectId, taskId, price]);
        await rows(stack, 'billing-svc', 'UPDATE projects SET balance = balance - $2 WHERE project_id = $1', [projectId, price]);
      },
      async () => {
        const report = await audit();
        expect(blamed(report), formatReport(report)).toEqual([['BILLED_ONCE', taskId]]);
        expect(report.violations[0]!.projectId).toBe(projectId);
        expect(report.ok).toBe(false);
      },
      async () => {
        await rows(stack, 'billing-svc', 'DELETE FROM ledger WHERE task_id = $1 AND attempt = 99', [taskId]);
        await rows(stack, 'billing-svc', 'UPDATE projects SET balance = balance + $2 WHERE project_id = $1', [projectId, price]);
      },
    );
  });

  it('reports a second debit that the balance does not reflect as BILLED_ONCE for the task and BUDGET_BALANCE for its project', async () => {
    const [, taskId] = completed;
    await planted(
      () => rows(stack, 'billing-svc', `INSERT INTO ledger (project_id, task_id, attempt, kind, amount) VALUES ($1, $2, 98, 'debit', $3)`, [projectId, taskId, price]).then(() => undefined),
      async () => {
        const report = await audit();
        expect(blamed(report), formatReport(report)).toEqual([['BILLED_ONCE', taskId], ['BUDGET_BALANCE', projectId]]);
        expect(report.violations.find((v) => v.invariant === 'BUDGET_BALANCE')!.detail).toMatch(/^balance \d+ != top-ups - debits \+ refunds = \d+$/);
      },
      () => rows(stack, 'billing-svc', 'DELETE FROM ledger WHERE task_id = $1 AND attempt = 98', [taskId]).then(() => undefined),
    );
  });

  it('reports a cancelled task whose approved review was never revoked as COMPENSATED', async () => {
    await planted(
      () => rows(stack, 'qa-svc', `UPDATE reviews SET status = 'passed', close_reason = NULL WHERE task_id = $1 AND attempt = 1`, [cancelled]).then(() => undefined),
      async () => {
        const report = await audit();
        expect(blamed(report), formatReport(report)).toEqual([['COMPENSATED', cancelled]]);
        expect(report.violations[0]!.detail).toBe('cancelled task keeps an approved review (attempt 1) in qa-svc');
      },
      () => rows(stack, 'qa-svc', `UPDATE reviews SET status = 'revoked', close_reason = 'CANCELLED' WHERE task_id = $1 AND attempt = 1`, [cancelled]).then(() => undefined),
    );
  });

  it('reports an assigned task whose lease ended long ago without a reopening as NOT_STUCK', async () => {
    const [before] = await rows<{ status: string; lease_expires_at: Date; updated_at: Date }>(stack, 'task-svc', 'SELECT status, lease_expires_at, updated_at FROM tasks WHERE task_id = $1', [assigned]);
    expect(before?.status).toBe('assigned');
    await planted(
      () => rows(stack, 'task-svc', `UPDATE tasks SET status = 'assigned', lease_expires_at = now() - interval '45 minutes', updated_at = now() - interval '1 hour' WHERE task_id = $1`, [assigned]).then(() => undefined),
      async () => {
        // Within the default bound the lease has not been over for long enough; past a small one it has.
        expect(blamed(await audit({ stuckMs: 3_600_000 }))).toEqual([]);
        const report = await audit({ stuckMs: 1_000 });
        expect(blamed(report), formatReport(report)).toEqual([['NOT_STUCK', assigned]]);
        expect(report.violations[0]!.detail).toMatch(/^assignment lease ended at .+ and the task was not reopened$/);
      },
      () => rows(stack, 'task-svc', 'UPDATE tasks SET lease_expires_at = $2, updated_at = $3 WHERE task_id = $1', [assigned, before!.lease_expires_at, before!.updated_at]).then(() => undefined),
    );
  });

  it('reports an outbox row left unpublished beyond the bound as OUTBOX_DRAINED', async () => {
    const [taskId] = completed;
    const [row] = await rows<{ id: string }>(stack, 'qa-svc', `SELECT id FROM outbox WHERE message_key = $1 AND event_type = 'QaPassed'`, [taskId]);
    expect(row).toBeDefined();
    // qa-svc's relay would publish the row again at once (harmlessly: consumers dedup it), so the
    // service is down while the auditor looks.
    await stack.processes['qa-svc'].stop();
    await planted(
      () => rows(stack, 'qa-svc', `WITH aged AS (UPDATE outbox SET created_at = now() - interval '2 hours' WHERE id = $1) INSERT INTO outbox_pending (id) VALUES ($1)`, [row!.id]).then(() => undefined),
      async () => {
        const report = await audit();
        expect(blamed(report), formatReport(report)).toEqual([['OUTBOX_DRAINED', null]]);
        expect(report.violations[0]!.detail).toMatch(new RegExp(`^qa-svc outbox row ${row!.id} \\(QaPassed\\) unpublished for (\\d+) s$`));
        expect(Number(/for (\d+) s$/.exec(report.violations[0]!.detail)![1])).toBeGreaterThanOrEqual(7_200);
      },
      async () => {
        await stack.start('qa-svc');
        await eventually(async () => expect(await rows(stack, 'qa-svc', 'SELECT id FROM outbox_pending WHERE id = $1', [row!.id])).toEqual([]));
        await stack.quiesce();
      },
    );
  });

  it('lists a message dead-lettered by qa-svc, which is not itself a violation', async () => {
    const topic = `${stack.prefix}.label-events`;
    await produceRaw(brokers, topic, [{ key: 'not-a-task', value: 'this is not an event' }]);
    const report = await eventually(async () => {
      const r = await audit();
      expect(r.deadLetters.map((d) => d.topic)).toContain(`${stack.prefix}.qa-svc.dlq`);
      return r;
    });
    const fromQa = report.deadLetters.find((d) => d.topic === `${stack.prefix}.qa-svc.dlq`)!;
    expect(fromQa.code).toBe('MESSAGING_DECODE_FAILED');
    expect(fromQa.source).toMatch(new RegExp(`^${topic.replace(/\./g, '\\.')}/\\d+@\\d+$`));
    expect(report.violations, formatReport(report)).toEqual([]);
    expect(report.ok).toBe(true);
  });

  it('fails from the command line with exit code 1 and the violations as JSON', async () => {
    const [taskId] = completed;
    const env: NodeJS.ProcessEnv = { ...process.env, KAFKA_BROKERS: brokers };
    for (const svc of serviceNames) env[`${svc.toUpperCase().replace('-', '_')}_DATABASE_URL`] = stack.databases[svc];
    await planted(
      () => rows(stack, 'billing-svc', `INSERT INTO ledger (project_id, task_id, attempt, kind, amount) VALUES ($1, $2, 97, 'debit', $3)`, [projectId, taskId, price]).then(() => undefined),
      async () => {
        const cli = await new Promise<{ code: number | string | null | undefined; stdout: string; stderr: string }>((resolve) =>
          execFile('npx', ['tsx', 'tools/auditor/src/cli.ts', '--json', '--prefix', stack.prefix, '--settle-ms', '0'], { cwd: repoRoot, env, timeout: 120_000, maxBuffer: 16 * 1024 * 1024 }, (error, stdout, stderr) =>
            resolve({ code: error ? error.code : 0, stdout, stderr }),
          ),
        );
        expect(cli.code, cli.stderr).toBe(1);
        const report = JSON.parse(cli.stdout) as AuditReport;
        expect(report.ok).toBe(false);
        expect(blamed(report)).toEqual([['BILLED_ONCE', taskId], ['BUDGET_BALANCE', projectId]]);
        expect(report.counts.tasks).toBe(5);
      },
      () => rows(stack, 'billing-svc', 'DELETE FROM ledger WHERE task_id = $1 AND attempt = 97', [taskId]).then(() => undefined),
    );
  });
});
