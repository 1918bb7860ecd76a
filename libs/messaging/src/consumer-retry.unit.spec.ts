import type { EachBatchPayload } from 'kafkajs';
import { describe, expect, it } from 'vitest';
import { createMetrics } from '@labelflow/telemetry';
import { captureLogs, metricValue } from '@labelflow/testing';
import type { Delivery, DeliveryOutcome } from './consumer-batch';
import { createConsumerMetrics } from './consumer-metrics';
import { createRunApplier, type Step } from './consumer-retry';
import { MessagingErrors } from './errors';

interface Msg {
  readonly type: 'Msg';
  readonly n: number;
}

const delivery = (n: number): Delivery<Msg> => ({
  event: { type: 'Msg', n },
  meta: { topic: 't', partition: 0, offset: String(n), headers: {}, source: `t/0@${n}`, timestamp: 0 },
});

/** A fetched batch as kafkajs hands it over, still this consumer's until `take()` is called. */
const fakePayload = () => {
  let running = true;
  const payload = {
    batch: { topic: 't' },
    isRunning: () => running,
    isStale: () => false,
    heartbeat: async () => undefined,
  } as unknown as EachBatchPayload;
  return { payload, take: () => (running = false) };
};

/**
 * A processor that applies a run atomically unless one of its messages is in `failing`: then it
 * throws, and nothing of the run counts, as the exactly-once shell's one transaction would.
 */
const setup = (opts: { failing?: (n: number) => Error | undefined; rejectsWith?: { readonly n: number; readonly value: unknown }; maxAttempts?: number } = {}) => {
  const applied: number[][] = [];
  const deadLettered: { n: number; code: string }[] = [];
  const done: number[] = [];
  const metrics = createMetrics({ service: 'retry-test', defaults: false });
  const apply = createRunApplier<Msg>({
    processor: {
      handles: () => true,
      process: async (run) => {
        for (const { event } of run) {
          if (opts.rejectsWith?.n === event.n) throw opts.rejectsWith.value;
          const error = opts.failing?.(event.n);
          if (error) throw error;
        }
        applied.push(run.map((d) => d.event.n));
        return run.map((): DeliveryOutcome => ({ status: 'applied' }));
      },
    },
    retry: { initialMs: 1, maxMs: 2, maxAttempts: opts.maxAttempts ?? 3 },
    isRetriable: (e) => (e as { retriable?: boolean }).retriable === true,
    metrics: createConsumerMetrics(metrics),
    log: captureLogs({ service: 'retry-test', level: 'error' }).logger,
    record: () => undefined,
    deadLetter: async (d, code): Promise<Step> => {
      deadLettered.push({ n: d.event.n, code });
      return 'done';
    },
  });
  return { apply, applied, deadLettered, done, metrics, onDone: (last: Delivery<Msg>) => done.push(last.event.n) };
};

describe('the retry, split and dead-letter policy', () => {
  it('applies a run that succeeds in one processor call and reports its last delivery done', async () => {
    const { apply, applied, done, onDone } = setup();
    const { payload } = fakePayload();
    expect(await apply([1, 2, 3].map(delivery), payload, onDone)).toBe('done');
    expect(applied).toEqual([[1, 2, 3]]);
    expect(done).toEqual([3]);
  });

  it('splits a run around a poison message: its neighbours commit in order and it alone is dead-lettered', async () => {
    const poison = Object.assign(new Error('bad row'), { code: 'BAD_ROW' });
    const { apply, applied, deadLettered, done, metrics, onDone } = setup({ failing: (n) => (n === 3 ? poison : undefined), maxAttempts: 2 });
    const { payload } = fakePayload();
    expect(await apply([1, 2, 3, 4, 5].map(delivery), payload, onDone)).toBe('done');
    expect(applied.flat()).toEqual([1, 2, 4, 5]);
    expect(deadLettered).toEqual([{ n: 3, code: 'BAD_ROW' }]);
    expect(done).toEqual([2, 3, 5]);
    expect(metricValue(await metrics.render(), 'consumer_retries_total', { topic: 't', kind: 'failure' })).toBe(2);
  });

  it('retries a transient failure without splitting the run, and never dead-letters it', async () => {
    let failures = 2;
    const transient = Object.assign(new Error('database away'), { retriable: true });
    const { apply, applied, deadLettered, metrics, onDone } = setup({ failing: () => (failures-- > 0 ? transient : undefined) });
    const { payload } = fakePayload();
    expect(await apply([1, 2, 3, 4].map(delivery), payload, onDone)).toBe('done');
    expect(applied).toEqual([[1, 2, 3, 4]]);
    expect(deadLettered).toEqual([]);
    expect(metricValue(await metrics.render(), 'consumer_retries_total', { topic: 't', kind: 'transient' })).toBe(2);
    expect(metricValue(await metrics.render(), 'consumer_retries_total', { topic: 't', kind: 'split' })).toBe(0);
  });

  it('splits a run whose transient failure outlasts a few tries, so the messages before the culprit commit', async () => {
    const transient = Object.assign(new Error('lock keeps being lost'), { retriable: true });
    let culpritFailures = 6;
    const { apply, applied, deadLettered, onDone } = setup({ failing: (n) => (n === 4 && culpritFailures-- > 0 ? transient : undefined) });
    const { payload } = fakePayload();
    expect(await apply([1, 2, 3, 4].map(delivery), payload, onDone)).toBe('done');
    expect(applied).toEqual([
      [1, 2],
      [3, 4],
    ]);
    expect(deadLettered).toEqual([]);
  });

  it('dead-letters a message whose handler rejects with undefined, null or a string, instead of crashing the loop', async () => {
    for (const value of [undefined, null, 'boom']) {
      const { apply, applied, deadLettered, done, onDone } = setup({ rejectsWith: { n: 2, value }, maxAttempts: 2 });
      const { payload } = fakePayload();
      expect(await apply([1, 2, 3].map(delivery), payload, onDone), String(value)).toBe('done');
      expect(applied.flat(), String(value)).toEqual([1, 3]);
      expect(deadLettered, String(value)).toEqual([{ n: 2, code: MessagingErrors.HANDLER_FAILED }]);
      expect(done, String(value)).toEqual([1, 2, 3]);
    }
  });

  it('gives up on a batch taken away by a rebalance, leaving its offsets unresolved', async () => {
    const { apply, applied, done, onDone } = setup({ failing: () => Object.assign(new Error('away'), { retriable: true }) });
    const { payload, take } = fakePayload();
    const step = apply([1, 2].map(delivery), payload, onDone);
    take();
    expect(await step).toBe('aborted');
    expect(applied).toEqual([]);
    expect(done).toEqual([]);
  });
});
