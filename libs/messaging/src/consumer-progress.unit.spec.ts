import type { Admin } from 'kafkajs';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { createMetrics } from '@labelflow/telemetry';
import { captureLogs, metricValue } from '@labelflow/testing';
import { createConsumerMetrics } from './consumer-metrics';
import { createProgressProbe, kafkajsOffsets, LOG_START_EVERY, type OffsetsSource } from './consumer-progress';

type Offsets = Record<string, { low: number; high: number; committed?: number }[]>;

/**
 * The two admin calls the probe makes, over offsets the test sets: per topic, per partition (the
 * index), the log start, the high watermark and the group's committed offset (none when absent).
 */
const fakeAdmin = (offsets: () => Offsets) => {
  const calls = { topicOffsets: 0, groupOffsets: 0 };
  const admin = {
    async fetchTopicOffsets(topic: string) {
      calls.topicOffsets += 1;
      return (offsets()[topic] ?? []).map((p, partition) => ({ partition, offset: String(p.high), high: String(p.high), low: String(p.low) }));
    },
    async fetchOffsets({ topics }: { groupId: string; topics: string[] }) {
      calls.groupOffsets += 1;
      return topics.map((topic) => ({
        topic,
        partitions: (offsets()[topic] ?? []).map((p, partition) => ({ partition, offset: String(p.committed ?? -1), metadata: null })),
      }));
    },
  } as unknown as Admin;
  return { admin, calls };
};

/**
 * A probe over one partition of labelflow.qa-events whose offsets the test sets: the high
 * watermark, the log start (read only when the probe asks for it) and the group's commit.
 */
const onePartition = (offsets: { high: number; low: () => number; committed: () => number }) => {
  const asked: boolean[] = [];
  const tp = 'labelflow.qa-events/0';
  const source: OffsetsSource = {
    async topicOffsets(_topics, logStart) {
      asked.push(logStart);
      const highs = new Map([[tp, offsets.high]]);
      return logStart ? { highs, lows: new Map([[tp, offsets.low()]]) } : { highs };
    },
    async committedOffsets() {
      return new Map([[tp, offsets.committed()]]);
    },
  };
  const metrics = createMetrics({ service: 'progress-test', defaults: false });
  const probe = createProgressProbe({ source, groupId: 'labelflow.qa-svc', topics: ['labelflow.qa-events'], everyMs: 1_000, metrics: createConsumerMetrics(metrics), log: captureLogs({ service: 'progress-test' }).logger });
  return { asked, probe, metrics };
};

describe('the progress probe', () => {
  beforeEach(() => vi.useFakeTimers());
  afterEach(() => vi.useRealTimers());

  const setup = (offsets: () => Offsets) => {
    const metrics = createMetrics({ service: 'progress-test', defaults: false });
    const { admin, calls } = fakeAdmin(offsets);
    const probe = createProgressProbe({
      source: kafkajsOffsets(admin),
      groupId: 'labelflow.qa-svc',
      topics: Object.keys(offsets()),
      everyMs: 1_000,
      metrics: createConsumerMetrics(metrics),
      log: captureLogs({ service: 'progress-test' }).logger,
    });
    const lag = async (topic: string, partition: number) =>
      metricValue(await metrics.render(), 'consumer_lag_messages', { group: 'labelflow.qa-svc', topic, partition: String(partition) });
    return { probe, calls, metrics, lag };
  };

  it('reports the lag of every partition as the high watermark minus the group committed offset', async () => {
    const { probe, lag, metrics } = setup(() => ({
      'labelflow.label-events': [
        { low: 0, high: 10, committed: 7 },
        { low: 0, high: 4, committed: 4 },
      ],
      'labelflow.task-events': [{ low: 0, high: 3, committed: 0 }],
    }));
    probe.start();
    await vi.advanceTimersByTimeAsync(1_000);
    probe.stop();
    expect(await lag('labelflow.label-events', 0)).toBe(3);
    expect(await lag('labelflow.label-events', 1)).toBe(0);
    expect(await lag('labelflow.task-events', 0)).toBe(3);
    expect(await metrics.render()).toMatch(/consumer_lag_messages\{group="labelflow\.qa-svc",topic="labelflow\.label-events",partition="0",service="progress-test"\} 3/);
  });

  it('counts a partition the group never committed on from its log start, not from offset zero', async () => {
    const { probe, lag } = setup(() => ({ 'labelflow.qa-events': [{ low: 40, high: 50 }, { low: 0, high: 0 }] }));
    probe.start();
    await vi.advanceTimersByTimeAsync(1_000);
    probe.stop();
    expect(await lag('labelflow.qa-events', 0)).toBe(10);
    expect(await lag('labelflow.qa-events', 1)).toBe(0);
  });

  it('never reports a negative lag when the group committed past the watermark it read a moment before', async () => {
    const { probe, lag } = setup(() => ({ 'labelflow.qa-events': [{ low: 0, high: 5, committed: 8 }] }));
    probe.start();
    await vi.advanceTimersByTimeAsync(1_000);
    probe.stop();
    expect(await lag('labelflow.qa-events', 0)).toBe(0);
  });

  it('follows the group as it catches up, with no admin call beyond the two the progress probe makes', async () => {
    let committed = 2;
    const { probe, lag, calls } = setup(() => ({ 'labelflow.billing-events': [{ low: 0, high: 6, committed }] }));
    const t0 = Date.now();
    probe.start();
    await vi.advanceTimersByTimeAsync(1_000);
    expect(await lag('labelflow.billing-events', 0)).toBe(4);
    committed = 6;
    await vi.advanceTimersByTimeAsync(1_000);
    probe.stop();
    expect(await lag('labelflow.billing-events', 0)).toBe(0);
    // The second probe saw the group past both probes' watermarks: caught up to the newest.
    expect(probe.caughtUpTo()).toBe(t0 + 2_000);
    expect(calls).toEqual({ topicOffsets: 2, groupOffsets: 2 });
  });

  it('reads the log starts on its first probe and then once in LOG_START_EVERY probes, counting the lag from the last ones read', async () => {
    let low = 0;
    // A group that consumes, slowly: its commit moves on every probe.
    const { asked, probe, metrics } = onePartition({ high: 100, low: () => low, committed: () => asked.length });
    const lag = async () => metricValue(await metrics.render(), 'consumer_lag_messages', { group: 'labelflow.qa-svc', topic: 'labelflow.qa-events', partition: '0' });
    probe.start();
    await vi.advanceTimersByTimeAsync(1_000);
    expect(await lag()).toBe(99);
    // Retention deleted the first 60 messages: seen only once the log starts are read again.
    low = 60;
    await vi.advanceTimersByTimeAsync((LOG_START_EVERY - 1) * 1_000);
    expect(asked).toHaveLength(LOG_START_EVERY);
    expect(await lag()).toBe(100 - LOG_START_EVERY);
    await vi.advanceTimersByTimeAsync(1_000);
    probe.stop();
    expect(await lag()).toBe(40);
    expect(asked.map((a, i) => (a ? i : -1)).filter((i) => i >= 0)).toEqual([0, LOG_START_EVERY]);
  });

  it('counts a partition whose records were all deleted before the group committed there as passed, so deadlines keep their clock', async () => {
    const { probe, lag } = setup(() => ({ 'labelflow.task-events': [{ low: 3, high: 3 }, { low: 0, high: 5, committed: 5 }] }));
    const t0 = Date.now();
    probe.start();
    await vi.advanceTimersByTimeAsync(2_000);
    probe.stop();
    expect(probe.caughtUpTo()).toBe(t0 + 2_000);
    expect(await lag('labelflow.task-events', 0)).toBe(0);
  });

  it('reads the log starts again when a partition holds the group up with a commit that does not move, and then sees it passed', async () => {
    let low = 0;
    const { asked, probe } = onePartition({ high: 3, low: () => low, committed: () => -1 });
    const t0 = Date.now();
    probe.start();
    await vi.advanceTimersByTimeAsync(1_000);
    expect(probe.caughtUpTo()).toBeUndefined();
    // Every record is deleted (retention, deleteRecords) after the first read of the log start.
    low = 3;
    await vi.advanceTimersByTimeAsync(3_000);
    probe.stop();
    // The third probe read the new log start and passed all three; the fourth passed too.
    expect(probe.caughtUpTo()).toBe(t0 + 4_000);
    expect(asked.slice(0, 3)).toEqual([true, false, true]);
  });
});
