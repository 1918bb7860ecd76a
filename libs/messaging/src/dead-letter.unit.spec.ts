import type { EachBatchPayload, Producer } from 'kafkajs';
import { describe, expect, it } from 'vitest';
import { createMetrics } from '@labelflow/telemetry';
import { captureLogs, metricValue } from '@labelflow/testing';
import { createConsumerMetrics } from './consumer-metrics';
import { createDeadLetter } from './dead-letter';

const raw = { topic: 'labelflow.task-events', partition: 2, offset: '41', key: Buffer.from('t-1'), value: Buffer.from('not json'), headers: { 'event-type': 'TaskCreated' } };
const payload = { isRunning: () => true, isStale: () => false, heartbeat: async () => undefined } as unknown as EachBatchPayload;

describe('the dead-letter sender', () => {
  it('retries a send the broker keeps failing until it succeeds, counting each failed try where stalls are looked for', async () => {
    const metrics = createMetrics({ service: 'dlq-test', defaults: false });
    const sent: unknown[] = [];
    let failures = 2;
    const producer = {
      send: async (record: unknown) => {
        if (failures-- > 0) throw new Error('the broker is away');
        sent.push(record);
        return [];
      },
    } as unknown as Producer;
    const { logger, lines } = captureLogs({ service: 'dlq-test' });
    const deadLetter = createDeadLetter({ producer, topic: 'labelflow.task-svc.dlq', groupId: 'labelflow.task-svc', retry: { initialMs: 1, maxMs: 2, maxAttempts: 3 }, metrics: createConsumerMetrics(metrics), log: logger });

    expect(await deadLetter(raw, 'DECODE_FAILED', 'value is not JSON', payload)).toBe('done');
    expect(sent).toHaveLength(1);
    const text = await metrics.render();
    expect(metricValue(text, 'consumer_retries_total', { topic: raw.topic, kind: 'dead_letter' })).toBe(2);
    expect(metricValue(text, 'consumer_dead_lettered_total', { topic: raw.topic, code: 'DECODE_FAILED' })).toBe(1);
    expect(lines.filter((l) => l.msg === 'dead-letter publish failed; retrying')).toHaveLength(2);
  });
});
