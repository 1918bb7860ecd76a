import { describe, expect, it } from 'vitest';
import { createLogger, createMetrics } from '@labelflow/telemetry';
import { eventually, metricValue } from '@labelflow/testing';
import { createWebhook } from './webhook';

const logger = createLogger({ service: 'saga-monitor', level: 'silent' });

/** A receiver that answers each post with the next status (a throw for `'down'`), recording the bodies. */
function receiver(...answers: (number | 'down')[]) {
  const bodies: unknown[] = [];
  const fetch = (async (_url: string, init: RequestInit) => {
    bodies.push(JSON.parse(String(init.body)));
    const answer = answers.shift() ?? 200;
    if (answer === 'down') throw new Error('connect ECONNREFUSED');
    return new Response(null, { status: answer });
  }) as typeof globalThis.fetch;
  return { fetch, bodies };
}

describe('saga monitor: alert webhook', () => {
  it('posts the notice once when the receiver takes it', async () => {
    const metrics = createMetrics({ service: 'test', defaults: false });
    const { fetch, bodies } = receiver(204);
    const webhook = createWebhook({ url: 'http://hook.test/', attempts: 3, timeoutMs: 1_000, logger, metrics, fetch, backoffMs: () => 1 });
    expect(await webhook.send({ status: 'firing', taskId: '1', step: 'qa_started' })).toBe('delivered');
    await webhook.close();
    expect(bodies).toEqual([{ status: 'firing', taskId: '1', step: 'qa_started' }]);
    expect(metricValue(await metrics.render(), 'saga_webhook_deliveries_total', { outcome: 'delivered' })).toBe(1);
  });

  it('tries again after a failure or a 5xx, and gives up after the last attempt', async () => {
    const metrics = createMetrics({ service: 'test', defaults: false });
    const { fetch, bodies } = receiver('down', 503, 500, 200);
    const webhook = createWebhook({ url: 'http://hook.test/', attempts: 3, timeoutMs: 1_000, logger, metrics, fetch, backoffMs: () => 1 });
    expect(await webhook.send({ status: 'resolved', taskId: '1' })).toBe('failed');
    expect(metricValue(await metrics.render(), 'saga_webhook_deliveries_total', { outcome: 'failed' })).toBe(1);
    await webhook.close();
    expect(bodies).toHaveLength(3);
  });

  it('does not retry a notice the receiver refuses as wrong (4xx)', async () => {
    const metrics = createMetrics({ service: 'test', defaults: false });
    const { fetch, bodies } = receiver(400);
    const webhook = createWebhook({ url: 'http://hook.test/', attempts: 5, timeoutMs: 1_000, logger, metrics, fetch, backoffMs: () => 1 });
    void webhook.send({ status: 'firing' });
    await eventually(async () => expect(metricValue(await metrics.render(), 'saga_webhook_deliveries_total', { outcome: 'failed' })).toBe(1));
    await webhook.close();
    expect(bodies).toHaveLength(1);
  });

  it("sends an alert's resolved only after its firing, even while the firing is retried, and other alerts meanwhile", async () => {
    const { fetch, bodies } = receiver(503, 200, 200, 200);
    const webhook = createWebhook({ url: 'http://hook.test/', attempts: 3, timeoutMs: 1_000, logger, fetch, backoffMs: () => 20 });
    void webhook.send({ status: 'firing', taskId: '1', step: 'qa_started', attempt: 1 });
    void webhook.send({ status: 'resolved', taskId: '1', step: 'qa_started', attempt: 1 });
    void webhook.send({ status: 'firing', taskId: '2', step: 'qa_started', attempt: 1 });
    await eventually(() => expect(bodies).toHaveLength(4));
    await webhook.close();

    const ofTask1 = (bodies as { status: string; taskId: string }[]).filter((b) => b.taskId === '1').map((b) => b.status);
    expect(ofTask1).toEqual(['firing', 'firing', 'resolved']);
    // Task 2's alert did not wait for task 1's retry.
    expect((bodies as { taskId: string }[]).findIndex((b) => b.taskId === '2')).toBe(1);
  });

  it('has at most `concurrency` posts under way, and delivers every one', async () => {
    let inFlight = 0;
    let most = 0;
    const fetch = (async () => {
      most = Math.max(most, ++inFlight);
      await new Promise((resolve) => setTimeout(resolve, 5));
      inFlight--;
      return new Response(null, { status: 204 });
    }) as unknown as typeof globalThis.fetch;
    const metrics = createMetrics({ service: 'test', defaults: false });
    const webhook = createWebhook({ url: 'http://hook.test/', attempts: 1, timeoutMs: 1_000, logger, metrics, fetch, concurrency: 3 });
    const outcomes = await Promise.all(Array.from({ length: 20 }, (_, i) => webhook.send({ status: 'firing', taskId: String(i), step: 'qa_started', attempt: 1 })));
    await webhook.close();

    expect(new Set(outcomes)).toEqual(new Set(['delivered']));
    expect(most).toBe(3);
    expect(metricValue(await metrics.render(), 'saga_webhook_deliveries_total', { outcome: 'delivered' })).toBe(20);
  });

  it('stops waiting between tries when the monitor closes', async () => {
    const { fetch, bodies } = receiver(503, 503, 503);
    const webhook = createWebhook({ url: 'http://hook.test/', attempts: 3, timeoutMs: 1_000, logger, fetch, backoffMs: () => 60_000 });
    const outcome = webhook.send({ status: 'firing' });
    const started = Date.now();
    // Let the first try fail and the backoff begin, then close: the close must not sit out the minute.
    await eventually(() => expect(bodies).toHaveLength(1));
    await webhook.close();
    expect(Date.now() - started).toBeLessThan(5_000);
    // Woken by the close, the delivery stops, neither delivered nor given up: its queued row stays for the next start.
    expect(await outcome).toBe('interrupted');
    expect(bodies).toHaveLength(1);
    expect(await webhook.send({ status: 'firing' })).toBe('interrupted');
  });
});
