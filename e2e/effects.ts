import { expect } from 'vitest';
import { queryRows, type TestStack } from '@labelflow/testing';

/**
 * The books of a set of approved tasks, read from each service's own database: everything a
 * duplicate could have doubled. Each task is expected completed, labelled once, reviewed once and
 * billed exactly once, for the given attempt.
 */
export async function expectExactlyOnce(stack: TestStack, projectId: string, taskIds: readonly string[], price: number, budget: number): Promise<void> {
  const count = async (svc: Parameters<TestStack['http']>[0], sql: string) => Number((await queryRows<{ n: string }>(stack.databases[svc], sql, [taskIds]))[0]?.n);
  const n = taskIds.length;
  const statuses = await queryRows<{ status: string }>(stack.databases['task-svc'], 'SELECT status FROM tasks WHERE task_id = ANY($1::text[])', [taskIds]);
  expect(statuses.map((s) => s.status)).toEqual(taskIds.map(() => 'completed'));
  for (const [svc, type] of [['task-svc', 'TaskCreated'], ['task-svc', 'TaskAssigned'], ['task-svc', 'TaskCompleted'], ['label-svc', 'LabelSubmitted'], ['qa-svc', 'QaStarted'], ['qa-svc', 'QaPassed'], ['billing-svc', 'BillingCompleted']] as const) {
    expect(await count(svc, `SELECT count(*) AS n FROM outbox_messages WHERE event_type = '${type}' AND message_key = ANY($1::text[])`), `${type} events in ${svc}`).toBe(n);
  }
  expect(await count('label-svc', `SELECT count(*) AS n FROM labels WHERE status = 'accepted' AND task_id = ANY($1::text[])`)).toBe(n);
  expect(await count('qa-svc', `SELECT count(*) AS n FROM reviews WHERE status = 'passed' AND task_id = ANY($1::text[])`)).toBe(n);
  expect(await count('billing-svc', `SELECT count(*) AS n FROM ledger WHERE kind = 'debit' AND task_id = ANY($1::text[])`)).toBe(n);
  expect(await count('billing-svc', `SELECT count(*) AS n FROM ledger WHERE kind = 'credit' AND task_id = ANY($1::text[])`)).toBe(n);
  const project = await stack.http('billing-svc').get<{ balance: number }>(`/projects/${projectId}`);
  expect(project.body.balance).toBe(budget - price * n);
}
