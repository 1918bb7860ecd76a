import { AsyncLocalStorage } from 'node:async_hooks';
import { describe, expect, it } from 'vitest';
import type { BatchProcessor, Delivery, DeliveryOutcome } from './consumer-batch';
import { groupCommit, type GroupCommitOptions } from './group-commit';

interface Msg {
  readonly type: 'Msg';
  readonly n: number;
}

const delivery = (partition: number, n: number): Delivery<Msg> => ({
  event: { type: 'Msg', n },
  meta: { topic: 't', partition, offset: String(n), headers: {}, source: `t/${partition}@${n}`, timestamp: 0 },
});
const run = (partition: number, ...ns: number[]) => ns.map((n) => delivery(partition, n));

/**
 * A processor applying a run atomically, as the exactly-once shell's one transaction does: it
 * throws when the run holds a message in `failing` (then nothing of the run counts), and answers
 * each delivery with an outcome naming its message, so slices can be checked.
 */
const fakeProcessor = (failing: (n: number) => boolean = () => false) => {
  const calls: number[][] = [];
  const processor: BatchProcessor<Msg> = {
    handles: (type) => type === 'Msg',
    async process(deliveries) {
      const ns = deliveries.map((d) => d.event.n);
      calls.push(ns);
      await new Promise((r) => setTimeout(r, 1));
      const bad = ns.find(failing);
      if (bad !== undefined) throw new Error(`message ${bad} fails`);
      return ns.map((n): DeliveryOutcome => ({ status: 'ignored', code: 'N', reason: String(n) }));
    },
  };
  return { processor, calls };
};

const reasons = (outcomes: readonly DeliveryOutcome[]) => outcomes.map((o) => (o.status === 'ignored' ? Number(o.reason) : NaN));
const grouped = (processor: BatchProcessor<Msg>, options: Partial<GroupCommitOptions<Msg>> = {}) => groupCommit(processor, { maxDeliveries: 100, concurrency: 1, ...options });

describe('groupCommit', () => {
  it('applies the runs of several partitions that arrive together in one call and gives each caller its own outcomes', async () => {
    const { processor, calls } = fakeProcessor();
    const groups: number[] = [];
    const p = grouped(processor, { onGroup: (runs) => groups.push(runs) });

    const [a, b, c] = await Promise.all([p.process(run(0, 1, 2)), p.process(run(1, 3)), p.process(run(2, 4, 5, 6))]);

    expect(calls).toEqual([[1, 2, 3, 4, 5, 6]]);
    expect(reasons(a!)).toEqual([1, 2]);
    expect(reasons(b!)).toEqual([3]);
    expect(reasons(c!)).toEqual([4, 5, 6]);
    expect(groups).toEqual([3]);
  });

  it('queues the runs that arrive while a call is in flight and applies them together in the next call', async () => {
    const { processor, calls } = fakeProcessor();
    const p = grouped(processor);

    const first = p.process(run(0, 1));
    await new Promise((r) => setImmediate(r)); // the first call is now in flight
    const later = [p.process(run(1, 2)), p.process(run(2, 3))];

    await Promise.all([first, ...later]);
    expect(calls).toEqual([[1], [2, 3]]);
  });

  it('never cuts a run and starts a new call when the next run would pass maxDeliveries', async () => {
    const { processor, calls } = fakeProcessor();
    const p = grouped(processor, { maxDeliveries: 3 });

    await Promise.all([p.process(run(0, 1, 2)), p.process(run(1, 3)), p.process(run(2, 4, 5, 6, 7)), p.process(run(3, 8))]);

    expect(calls).toEqual([[1, 2, 3], [4, 5, 6, 7], [8]]);
  });

  it('tries each run alone when a merged call fails, so only the caller whose run holds the poison message sees the error', async () => {
    const { processor, calls } = fakeProcessor((n) => n === 4);
    const p = grouped(processor);

    const results = await Promise.allSettled([p.process(run(0, 1, 2)), p.process(run(1, 3, 4)), p.process(run(2, 5))]);

    expect(calls).toEqual([[1, 2, 3, 4, 5], [1, 2], [3, 4], [5]]);
    expect(results.map((r) => r.status)).toEqual(['fulfilled', 'rejected', 'fulfilled']);
    expect((results[1] as PromiseRejectedResult).reason).toEqual(new Error('message 4 fails'));
    expect(reasons((results[0] as PromiseFulfilledResult<readonly DeliveryOutcome[]>).value)).toEqual([1, 2]);
  });

  it('fails every caller at once when a merged call fails in a way waiting can fix, instead of trying each run alone against a database that is away', async () => {
    const away = Object.assign(new Error('connect ECONNREFUSED'), { code: 'ECONNREFUSED' });
    const calls: number[][] = [];
    const p = grouped(
      {
        handles: () => true,
        async process(deliveries) {
          calls.push(deliveries.map((d) => d.event.n));
          throw away;
        },
      },
      { isRetriable: (error) => error === away },
    );

    const results = await Promise.allSettled([p.process(run(0, 1, 2)), p.process(run(1, 3)), p.process(run(2, 4))]);

    expect(calls).toEqual([[1, 2, 3, 4]]);
    expect(results.map((r) => (r.status === 'rejected' ? r.reason : r.status))).toEqual([away, away, away]);
  });

  it('hands a processor that throws synchronously back to its caller as a rejection and keeps serving the next runs', async () => {
    let calls = 0;
    const p = grouped({
      handles: () => true,
      process: (deliveries) => {
        calls++;
        if (calls === 1) throw new Error('synchronous');
        return Promise.resolve(deliveries.map((): DeliveryOutcome => ({ status: 'applied' })));
      },
    });

    await expect(p.process(run(0, 1))).rejects.toThrow('synchronous');
    await expect(p.process(run(0, 2))).resolves.toEqual([{ status: 'applied' }]);
  });

  it('runs a lone run in the async context of its caller, and a merged call in the context `merged` gives it', async () => {
    const als = new AsyncLocalStorage<string>();
    const seen: (string | undefined)[] = [];
    const processor: BatchProcessor<Msg> = {
      handles: () => true,
      async process(deliveries) {
        seen.push(als.getStore());
        return deliveries.map((): DeliveryOutcome => ({ status: 'applied' }));
      },
    };
    const p = grouped(processor, { merged: (_deliveries, work) => als.run('merged', work) });

    await als.run('caller-a', () => p.process(run(0, 1)));
    await Promise.all([als.run('caller-b', () => p.process(run(0, 2))), als.run('caller-c', () => p.process(run(1, 3)))]);

    expect(seen).toEqual(['caller-a', 'merged']);
  });

  it('keeps at most `concurrency` calls in flight', async () => {
    let inFlight = 0;
    let most = 0;
    const processor: BatchProcessor<Msg> = {
      handles: () => true,
      async process(deliveries) {
        most = Math.max(most, ++inFlight);
        await new Promise((r) => setTimeout(r, 5));
        inFlight--;
        return deliveries.map((): DeliveryOutcome => ({ status: 'applied' }));
      },
    };
    const p = grouped(processor, { concurrency: 2, maxDeliveries: 1 });

    await Promise.all(Array.from({ length: 6 }, (_, i) => p.process(run(i, i))));

    expect(most).toBe(2);
  });
});
