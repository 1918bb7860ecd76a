import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { eventually, queryRows, readTopic, startStack, type TestStack } from '@labelflow/testing';
import { claim, createProject, createTask, submitLabels } from './saga';

describe('W3C trace context', () => {
  let stack: TestStack;
  const infra = inject('infra');
  beforeAll(async () => {
    stack = await startStack(infra);
  });
  afterAll(async () => stack?.stop());

  it('travels from an HTTP request through Kafka headers into the events the next service emits', async () => {
    const traceId = '4bf92f3577b34da6a3ce929d0e0e4736';
    const traceparent = `00-${traceId}-00f067aa0ba902b7-01`;
    const projectId = await createProject(stack, 1_000, 100);
    const taskId = await createTask(stack, projectId);
    await claim(stack, taskId, 'annotator-t');
    await submitLabels(stack, taskId, 'annotator-t', { annotatorId: 'annotator-t', annotations: [{ label: 'cat' }] }, { traceparent });

    const published = await readTopic(infra.kafkaBrokers, `${stack.prefix}.label-events`, (m) => m.some((x) => x.key?.toString() === taskId));
    const labelled = published.find((m) => m.key?.toString() === taskId);
    expect(labelled?.headers?.traceparent?.toString()).toContain(traceId);
    expect(labelled?.headers?.['event-type']?.toString()).toBe('LabelSubmitted');

    // qa-svc consumed LabelSubmitted and emitted QaStarted inside the same trace.
    await eventually(async () => {
      const rows = await queryRows<{ headers: Record<string, string> }>(stack.databases['qa-svc'], `SELECT headers FROM outbox WHERE event_type = 'QaStarted'`);
      expect(rows).toHaveLength(1);
      expect(rows[0]?.headers.traceparent).toContain(traceId);
    });
  });
});
