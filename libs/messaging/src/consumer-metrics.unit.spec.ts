import { describe, expect, it } from 'vitest';
import { createMetrics } from '@labelflow/telemetry';
import { createConsumerMetrics } from './consumer-metrics';

const sample = (text: string, line: RegExp): number | undefined => {
  const found = text.split('\n').find((l) => line.test(l));
  return found === undefined ? undefined : Number(found.split(' ').pop());
};

describe('the consumer metrics', () => {
  it('shows both crash series at 0 from the start, so increase() sees the first crash of each', async () => {
    const metrics = createMetrics({ service: 'test-svc', defaults: false });
    createConsumerMetrics(metrics);
    const text = await metrics.render();
    expect(sample(text, /^consumer_crashes_total\{[^}]*restart="kafkajs"/)).toBe(0);
    expect(sample(text, /^consumer_crashes_total\{[^}]*restart="loop"/)).toBe(0);
  });

  it('reports the caught-up clock as 0 until a probe passed, so a fresh instance cannot lift the max over the last instant of a stuck group', async () => {
    const metrics = createMetrics({ service: 'test-svc', defaults: false });
    createConsumerMetrics(metrics);
    expect(sample(await metrics.render(), /^consumer_caught_up_timestamp_seconds[ {]/)).toBe(0);
  });
});
