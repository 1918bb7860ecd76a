import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { listDeadLetters, replayDeadLetters } from '@labelflow/dlq';
import { createKafka } from '@labelflow/messaging';
import { createLogger } from '@labelflow/telemetry';
import { eventually, httpClient, metricValue, produceRaw, queryRows, startStack, type ServiceProcess, type TestStack } from '@labelflow/testing';
import { expectAuditClean } from './audit';
import { annotatorOf, claim, createProject, createTask, review, waitForStatus } from './saga';

/**
 * A gray release of LabelSubmitted v2: one label-svc instance writes v2 (the default), another,
 * pinned with LABEL_EVENT_VERSION=1, still writes v1, in one consumer group. Readers upcast v1, so
 * every saga runs the same whichever instance took its labels; a version newer than the readers
 * know is dead-lettered with its reason, never applied half-understood or dropped.
 */
describe('LabelSubmitted in two versions at once', () => {
  const infra = inject('infra');
  let stack: TestStack;
  let pinned: ServiceProcess;
  beforeAll(async () => {
    stack = await startStack(infra);
    pinned = await stack.startExtra('label-svc', { LABEL_EVENT_VERSION: '1' });
  });
  afterAll(async () => stack?.stop());

  /**
   * Submits labels to one chosen label-svc instance as the annotator. Until that instance has
   * learnt the assignment it answers 409 ASSIGNMENT_UNKNOWN, so the request waits (Prefer: wait)
   * and is sent again on that answer alone.
   */
  async function submitVia(instance: ServiceProcess, taskId: string, annotatorId: string, body: Record<string, unknown>): Promise<{ eventId: string }> {
    const labels = httpClient(instance.url, await annotatorOf(stack, taskId, annotatorId));
    const deadline = Date.now() + 60_000;
    for (;;) {
      const res = await labels.post<{ eventId: string; error?: { code: string } }>(`/tasks/${taskId}/labels`, { annotations: [{ label: 'cat', confidence: 0.9 }], ...body }, { prefer: 'wait=20' });
      if (res.status === 201) return res.body;
      if (res.status !== 409 || res.body.error?.code !== 'ASSIGNMENT_UNKNOWN' || Date.now() > deadline) throw new Error(`${instance.url} answered ${res.status}: ${JSON.stringify(res.body)}`);
    }
  }

  it('completes sagas whose labels went through the v1 and the v2 instance, a rework across both included, and the audit holds', async () => {
    const current = stack.processes['label-svc'];
    const projectId = await createProject(stack, 100_000, 100);
    const plan = Array.from({ length: 6 }, (_, i) => ({ instance: i % 2 === 0 ? current : pinned, annotator: `ann-ver-${i}`, durationMs: 1_000 * (i + 1) }));
    const taskIds = await Promise.all(plan.map(() => createTask(stack, projectId)));
    const written = new Map<string, { version: number; durationMs: number }>();
    await Promise.all(
      plan.map(async ({ instance, annotator, durationMs }, i) => {
        const taskId = taskIds[i]!;
        await claim(stack, taskId, annotator);
        const { eventId } = await submitVia(instance, taskId, annotator, { durationMs });
        written.set(eventId, { version: instance === pinned ? 1 : 2, durationMs });
        await review(stack, taskId, 'approve');
        await waitForStatus(stack, taskId, 'completed');
      }),
    );

    // A rework that crosses the versions: attempt 1's labels as v1, rejected; attempt 2's as v2.
    const reworked = await createTask(stack, projectId, 'is there a cat? (rework across versions)');
    await claim(stack, reworked, 'ann-ver-r1');
    written.set((await submitVia(pinned, reworked, 'ann-ver-r1', { durationMs: 4_200 })).eventId, { version: 1, durationMs: 4_200 });
    await review(stack, reworked, 'reject', 'that is a dog');
    await eventually(async () => expect((await stack.http('task-svc').get<{ status: string; attempt: number }>(`/tasks/${reworked}`)).body).toMatchObject({ status: 'open', attempt: 2 }));
    await claim(stack, reworked, 'ann-ver-r2');
    written.set((await submitVia(current, reworked, 'ann-ver-r2', { attempt: 2, durationMs: 6_100 })).eventId, { version: 2, durationMs: 6_100 });
    await review(stack, reworked, 'approve', undefined, 2);
    await waitForStatus(stack, reworked, 'completed');

    // Each instance wrote its own version: v2 with the duration, v1 without it (and with a matching header).
    const rows = await queryRows<{ event_id: string; payload: { version: number; payload: Record<string, unknown> }; headers: Record<string, string> }>(
      stack.databases['label-svc'],
      "SELECT event_id, payload, headers FROM outbox WHERE event_type = 'LabelSubmitted'",
    );
    expect(rows).toHaveLength(written.size);
    for (const row of rows) {
      const sent = written.get(row.event_id)!;
      expect(row.payload.version, row.event_id).toBe(sent.version);
      expect(row.headers['event-version'], row.event_id).toBe(String(sent.version));
      if (sent.version === 2) expect(row.payload.payload.durationMs).toBe(sent.durationMs);
      else expect(row.payload.payload).not.toHaveProperty('durationMs');
    }
    expect(new Set(rows.map((r) => r.payload.version))).toEqual(new Set([1, 2]));

    // qa-svc opened a review for every one of them, whichever version it came in; no reader refused one.
    expect(metricValue(await stack.metrics('qa-svc'), 'consumer_messages_total', { type: 'LabelSubmitted', outcome: 'applied' })).toBe(written.size);
    for (const reader of ['task-svc', 'qa-svc'] as const) {
      const metrics = await stack.metrics(reader);
      expect(metricValue(metrics, 'consumer_messages_total', { outcome: 'invalid' }), reader).toBe(0);
      expect(metricValue(metrics, 'consumer_dead_lettered_total'), reader).toBe(0);
    }
    await expectAuditClean(stack, infra.kafkaBrokers);
  });

  it('dead-letters a LabelSubmitted v3 at its readers with the version reason, keeps it through a premature replay, and goes on', async () => {
    const topic = `${stack.prefix}.label-events`;
    const taskId = '7391122347125620799';
    const v3 = {
      id: '7391122347129815099',
      type: 'LabelSubmitted',
      version: 3,
      taskId,
      projectId: '22222222-2222-4222-8222-222222222222',
      attempt: 1,
      occurredAt: new Date().toISOString(),
      producer: 'label-svc',
      payload: { annotatorId: 'ann-from-the-future', labels: { cat: 0.9 } },
    };
    await produceRaw(infra.kafkaBrokers, topic, [{ key: taskId, value: JSON.stringify(v3), headers: { 'event-type': 'LabelSubmitted', 'event-version': '3' } }]);

    const kafka = createKafka({ brokers: infra.kafkaBrokers.split(','), clientId: 'e2e-versions', logger: createLogger({ service: 'e2e', level: 'warn' }) });
    const lettersOf = (service: 'qa-svc' | 'task-svc', count: number) =>
      eventually(async () => {
        const letters = await listDeadLetters(kafka, `${stack.prefix}.${service}.dlq`);
        expect(letters).toHaveLength(count);
        return letters;
      }, { timeoutMs: 60_000, intervalMs: 500 });
    const reason = 'LabelSubmitted version 3 is newer than this consumer knows (up to version 2); replay it once the consumer is upgraded';
    for (const service of ['qa-svc', 'task-svc'] as const) {
      const [letter] = await lettersOf(service, 1);
      expect(letter, service).toMatchObject({ code: 'MESSAGING_VERSION_UNSUPPORTED', reason, key: taskId, headers: { 'event-version': '3' }, source: { topic } });
      expect(JSON.parse(letter!.value!.toString()), service).toEqual(v3);
    }

    // Replayed before any reader was upgraded, it comes back to the dead-letter topic: not applied, not lost.
    const [letter] = await lettersOf('qa-svc', 1);
    expect(await replayDeadLetters(kafka, `${stack.prefix}.qa-svc.dlq`, [letter!])).toEqual([{ id: letter!.id, ok: true, topic }]);
    const [, again] = await lettersOf('qa-svc', 2);
    expect(again).toMatchObject({ code: 'MESSAGING_VERSION_UNSUPPORTED', reason, key: taskId, source: { topic } });
    expect(again!.source!.offset).not.toBe(letter!.source!.offset);
    expect(again!.value).toEqual(letter!.value);
    expect((await stack.http('qa-svc').get(`/reviews/${taskId}`)).status).toBe(404);

    // The readers went on: a saga after it completes.
    const projectId = await createProject(stack, 1_000, 100);
    const next = await createTask(stack, projectId);
    await claim(stack, next, 'ann-ver-next');
    await submitVia(stack.processes['label-svc'], next, 'ann-ver-next', { durationMs: 900 });
    await review(stack, next, 'approve');
    await waitForStatus(stack, next, 'completed');
    await expectAuditClean(stack, infra.kafkaBrokers);
  });
});
