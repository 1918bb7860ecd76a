import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { eventually, produceRaw, readTopic, startStack, type TestStack } from '@labelflow/testing';
import { claim, createProject, createTask, review, submitLabels, waitForStatus } from './saga';

describe('garbage on a topic', () => {
  let stack: TestStack;
  const infra = inject('infra');
  beforeAll(async () => {
    stack = await startStack(infra);
  });
  afterAll(async () => stack?.stop());

  it('is dead-lettered with its coordinates while the consumer goes on', async () => {
    const topic = `${stack.prefix}.label-events`;
    const valid = { id: '6f1c1d7e-0000-4000-8000-000000000001', type: 'LabelSubmitted', version: 1, taskId: '6f1c1d7e-0000-4000-8000-0000000000aa', attempt: 1 };
    // One key, so both land on one partition and reach the consumer in this order.
    await produceRaw(infra.kafkaBrokers, topic, [
      { key: valid.taskId, value: Buffer.from([0xff, 0xfe, 0x00, 0x01]) },
      { key: valid.taskId, value: JSON.stringify(valid) },
    ]);

    const dlq = await readTopic(infra.kafkaBrokers, `${stack.prefix}.qa-svc.dlq`, (m) => m.length >= 2);
    const codes = dlq.map((m) => m.headers?.['dlq-error-code']?.toString());
    expect(codes).toEqual(['MESSAGING_DECODE_FAILED', 'MESSAGING_SCHEMA_INVALID']);
    expect(dlq[0]!.value).toEqual(Buffer.from([0xff, 0xfe, 0x00, 0x01]));
    expect(dlq[1]!.headers?.['dlq-source-topic']?.toString()).toBe(topic);
    expect(dlq[1]!.headers?.['dlq-error-message']?.toString()).toMatch(/projectId/);
    await eventually(() => expect(stack.processes['qa-svc'].logs()).toMatch(new RegExp(`"source":"${topic.replace(/\./g, '\\.')}/\\d+@\\d+".*invalid message skipped`)));

    const projectId = await createProject(stack, 1_000, 100);
    const taskId = await createTask(stack, projectId);
    await claim(stack, taskId, 'annotator-p');
    await submitLabels(stack, taskId, 'annotator-p');
    await review(stack, taskId, 'approve');
    await waitForStatus(stack, taskId, 'completed');
  });
});
