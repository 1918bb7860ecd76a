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

  it('dates the caught-up clock at the consumer start until a probe passes, not at 1970, so a restart with a backlog alerts on the minutes it has been catching up', async () => {
    const before = Date.now() / 1000;
    const metrics = createMetrics({ service: 'test-svc', defaults: false });
    createConsumerMetrics(metrics);
    const caughtUp = sample(await metrics.render(), /^consumer_caught_up_timestamp_seconds[ {]/);
    expect(caughtUp).toBeGreaterThanOrEqual(Math.floor(before));
    expect(caughtUp).toBeLessThanOrEqual(Date.now() / 1000 + 1);
  });
});
