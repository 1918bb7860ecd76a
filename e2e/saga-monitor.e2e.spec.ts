import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { eventually, metricValue, startStack, type TestStack } from '@labelflow/testing';
import { claim, createProject, createTask, review, submitLabels, waitForStatus } from './saga';

interface AlertsView {
  readonly alerts: readonly { taskId: string; step: string; attempt: number; alerting: boolean }[];
}
interface TimelineView {
  readonly outcome: string | null;
  readonly watches: readonly unknown[];
  readonly events: readonly { type: string }[];
}

/** An HTTP receiver for the monitor's webhook: keeps every JSON body posted to it. */
async function webhookReceiver(): Promise<{ url: string; bodies: Record<string, unknown>[]; server: Server }> {
  const bodies: Record<string, unknown>[] = [];
  const server = createServer((request, response) => {
    let text = '';
    request.on('data', (chunk: Buffer) => (text += chunk.toString()));
    request.on('end', () => {
      bodies.push(JSON.parse(text) as Record<string, unknown>);
      response.writeHead(204).end();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/alerts`, bodies, server };
}

describe('the saga watchdog (apps/saga-monitor) on the running stack', () => {
  const infra = inject('infra');
  let stack: TestStack;
  let hook: Awaited<ReturnType<typeof webhookReceiver>>;

  beforeAll(async () => {
    hook = await webhookReceiver();
    // The step under test keeps its default deadline (5 s). The others get ten minutes: a slow
    // machine must not raise an alert the test says never came. A quick sweep and notice drain
    // only shorten how long the test waits.
    stack = await startStack(
      infra,
      {},
      { monitor: { MONITOR_WEBHOOK_URL: hook.url, SWEEP_INTERVAL_MS: '200', MONITOR_NOTICE_POLL_MS: '100', SAGA_DEADLINE_BILLING_MS: '600000', SAGA_DEADLINE_COMPLETED_MS: '600000' } },
    );
  });
  afterAll(async () => {
    // A failed test must not leave qa-svc stopped for the stack's shutdown.
    stack?.processes['qa-svc'].child.kill('SIGCONT');
    await stack?.stop();
    hook?.server.close();
  });

  const monitor = () => stack.monitorHttp();
  const alerts = async () => (await monitor().get<AlertsView>('/sagas/alerts')).body.alerts;
  const metrics = async () => (await monitor().get<string>('/metrics')).body;

  it('alerts when qa-svc holds QaStarted back past its deadline, clears the alert when qa-svc resumes, and the saga completes', async () => {
    const projectId = await createProject(stack, 10_000, 100);
    const taskId = await createTask(stack, projectId);
    await claim(stack, taskId, 'ann-watch');

    // qa-svc stops consuming: LabelSubmitted waits on its topic and no QaStarted follows.
    const qa = stack.processes['qa-svc'];
    qa.child.kill('SIGSTOP');
    try {
      await submitLabels(stack, taskId, 'ann-watch');
      await eventually(
        async () => {
          expect(await alerts()).toEqual([expect.objectContaining({ taskId, step: 'qa_started', attempt: 1, alerting: true })]);
          expect(metricValue(await metrics(), 'saga_alerts_active', { step: 'qa_started' })).toBe(1);
          expect(hook.bodies).toContainEqual(expect.objectContaining({ status: 'firing', taskId, step: 'qa_started', attempt: 1 }));
        },
        { timeoutMs: 30_000, intervalMs: 250 },
      );
      expect(metricValue(await metrics(), 'saga_alerts_total', { step: 'qa_started' })).toBe(1);
      expect(stack.monitor!.logs()).toMatch(new RegExp(`saga step qa_started overdue: task ${taskId} attempt 1`));
    } finally {
      qa.child.kill('SIGCONT');
    }

    // qa-svc rejoins its group, opens the review and publishes QaStarted: the step arrived.
    await eventually(
      async () => {
        expect((await alerts()).filter((a) => a.taskId === taskId)).toEqual([]);
        expect(metricValue(await metrics(), 'saga_alerts_active', { step: 'qa_started' })).toBe(0);
        expect(hook.bodies).toContainEqual(expect.objectContaining({ status: 'resolved', taskId, step: 'qa_started', cause: 'arrived' }));
      },
      { timeoutMs: 90_000, intervalMs: 250 },
    );
    expect(metricValue(await metrics(), 'saga_alerts_resolved_total', { step: 'qa_started', cause: 'arrived' })).toBe(1);

    await review(stack, taskId, 'approve');
    await waitForStatus(stack, taskId, 'completed');
    // The monitor reads the four topics in no fixed order between them: TaskCompleted (task topic)
    // may reach it before BillingCompleted (billing topic), so the outcome alone does not say every
    // leg has been timed yet. Each leg is timed when its second end arrives, and only then.
    await eventually(async () => {
      const saga = (await monitor().get<TimelineView>(`/sagas/${taskId}`)).body;
      expect(saga).toMatchObject({ outcome: 'completed', watches: [] });
      const text = await metrics();
      expect(metricValue(text, 'saga_outcomes_total', { outcome: 'completed' })).toBe(1);
      // Every step of the happy path was timed once; the held-back one took at least its deadline.
      for (const [from, to] of [['created', 'assigned'], ['assigned', 'labelled'], ['labelled', 'qa_started'], ['qa_started', 'decided'], ['decided', 'billed'], ['billed', 'completed']] as const) {
        expect(metricValue(text, 'saga_step_seconds_count', { from, to }), `${from} → ${to}`).toBe(1);
      }
      expect(metricValue(text, 'saga_step_seconds_sum', { from: 'labelled', to: 'qa_started' })).toBeGreaterThanOrEqual(5);
    });
    // No other alert was raised on the way: billing and completion kept their (long) deadlines.
    expect(hook.bodies.filter((b) => b.status === 'firing')).toHaveLength(1);
  });
});
