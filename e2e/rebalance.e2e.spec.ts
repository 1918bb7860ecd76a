import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import type { ServiceName } from '@labelflow/contracts';
import { eventually, groupMembers, startStack, type TestStack } from '@labelflow/testing';
import { expectAuditClean } from './audit';
import { expectExactlyOnce } from './effects';
import { approveAll, createProject, createTask, waitForStatus } from './saga';

describe('two instances of a service in one consumer group', () => {
  let stack: TestStack;
  beforeAll(async () => {
    stack = await startStack(inject('infra'));
  });
  afterAll(async () => stack?.stop());

  it('stay exactly once through a rebalance forced mid-stream and the crash of one of them', async () => {
    const price = 90;
    const budget = 10_000;
    const projectId = await createProject(stack, budget, price);
    const tasks = await Promise.all(Array.from({ length: 24 }, (_, i) => createTask(stack, projectId, `rebalance ${i}`)));
    const drive = (ids: readonly string[]) => approveAll(stack, ids, 4);

    const first = drive(tasks.slice(0, 8));
    // A second billing-svc and a second qa-svc join their groups while approvals are flowing.
    const [billing2, qa2] = await Promise.all([stack.startExtra('billing-svc'), stack.startExtra('qa-svc')]);
    await first;
    // The rebalance did happen: each group now has two members, each holding partitions.
    const split = (name: ServiceName) =>
      eventually(async () => expect((await groupMembers(inject('infra').kafkaBrokers, stack.groupOf(name))).map((m) => m.partitions > 0)).toEqual([true, true]), { timeoutMs: 60_000, intervalMs: 250 });
    await Promise.all([split('billing-svc'), split('qa-svc')]);
    const second = drive(tasks.slice(8, 16));
    // The newcomers die hard mid-stream: their partitions move back after the session timeout, and
    // whatever they had claimed but not committed is redelivered.
    await billing2.kill();
    await qa2.kill();
    await second;
    await drive(tasks.slice(16));

    for (const taskId of tasks) await waitForStatus(stack, taskId, 'completed', 90_000);
    await stack.quiesce(90_000);
    await expectExactlyOnce(stack, projectId, tasks, price, budget);
    await expectAuditClean(stack, inject('infra').kafkaBrokers);
  });
});
