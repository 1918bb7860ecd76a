import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { eventually, queryRows, startStack, type TestStack } from '@labelflow/testing';
import { expectAuditClean } from './audit';
import { claim, createProject, createTask, review, submitLabels, waitForStatus } from './saga';

describe('a service killed between committing and publishing', () => {
  let stack: TestStack;
  beforeAll(async () => {
    // billing-svc SIGKILLs itself the moment its relay is about to publish committed outbox rows.
    stack = await startStack(inject('infra'), { 'billing-svc': { FAULT_KILL_BEFORE_PUBLISH: '1' } });
  });
  afterAll(async () => stack?.stop());

  it('loses nothing: after a restart the saga completes and the task is billed once', async () => {
    const projectId = await createProject(stack, 5_000, 400);
    const taskId = await createTask(stack, projectId);
    await claim(stack, taskId, 'annotator-k');
    await submitLabels(stack, taskId, 'annotator-k');
    await review(stack, taskId, 'approve');

    const { signal } = await stack.processes['billing-svc'].exited;
    expect(signal).toBe('SIGKILL');
    const billingDb = stack.databases['billing-svc'];
    const pending = await queryRows<{ event_type: string; pending: boolean }>(billingDb, 'SELECT event_type, EXISTS (SELECT 1 FROM outbox_pending p WHERE p.id = o.id) AS pending FROM outbox o');
    expect(pending).toEqual([{ event_type: 'BillingCompleted', pending: true }]);
    // task-svc reads QaPassed on its own, whenever billing-svc died.
    await eventually(async () => expect(await taskStatusIs(stack, taskId)).toBe('approved'));

    await stack.start('billing-svc');
    await waitForStatus(stack, taskId, 'completed');

    const ledger = await queryRows<{ kind: string; amount: string }>(billingDb, 'SELECT kind, amount FROM ledger WHERE task_id = $1 ORDER BY kind', [taskId]);
    expect(ledger.map((e) => [e.kind, Number(e.amount)])).toEqual([['credit', 400], ['debit', 400]]);
    const project = await stack.http('billing-svc').get<{ balance: number }>(`/projects/${projectId}`);
    expect(project.body.balance).toBe(4_600);
    await expectAuditClean(stack, inject('infra').kafkaBrokers);
  });
});

async function taskStatusIs(stack: TestStack, taskId: string): Promise<string> {
  return (await stack.http('task-svc').get<{ status: string }>(`/tasks/${taskId}`)).body.status;
}
