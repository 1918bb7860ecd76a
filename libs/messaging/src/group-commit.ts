import { AsyncResource } from 'node:async_hooks';
import type { BatchProcessor, Delivery, DeliveryOutcome } from './consumer-batch';

export interface GroupCommitOptions<E> {
  /** Most deliveries one merged call carries. A run is never cut: a larger one goes alone. */
  readonly maxDeliveries: number;
  /** Merged calls in flight at once; runs arriving meanwhile wait and go together in the next. */
  readonly concurrency: number;
  /**
   * Runs one merged call (several runs): where it belongs when it belongs to no single caller, e.g.
   * a context linking every delivery's trace. A lone run keeps its caller's async context as is.
   */
  readonly merged?: <T>(deliveries: readonly Delivery<E>[], work: () => Promise<T>) => Promise<T>;
  /** Told of each call made, with the runs and deliveries it carries (a metric). */
  readonly onGroup?: (runs: number, deliveries: number) => void;
  /**
   * True when waiting can fix the failure (the database away). A merged call that failed so
   * fails every caller at once: each retries on its own clock, heartbeating while it backs off,
   * instead of waiting while the runs are tried alone one after another, each failing the same way.
   */
  readonly isRetriable?: (error: unknown) => boolean;
}

export const defaultGroupCommit = { maxDeliveries: 1_000, concurrency: 2 } as const;

interface Pending<E> {
  readonly run: readonly Delivery<E>[];
  /** The call alone, in the async context of the caller that queued it. */
  readonly alone: () => Promise<readonly DeliveryOutcome[]>;
  readonly resolve: (outcomes: readonly DeliveryOutcome[]) => void;
  readonly reject: (error: unknown) => void;
}

/**
 * Group commit for a processor. kafkajs hands a fetch's batches to eachBatch one partition at a
 * time; under load each partition's batch holds an event or two, and each would pay a whole
 * transaction (dedup round trip, BEGIN, inbox, load, save, outbox, COMMIT, mark done) for them.
 * Here the runs that arrive together, or while a call is in flight, go to the processor as ONE run,
 * and each caller gets its own slice of the outcomes.
 *
 * The guarantees are the processor's, per caller: a merged call applies all of its runs or none,
 * so each caller's run is still all or nothing. A partition's next run is queued only after its
 * previous one returned, so per-partition (and so per-task) order holds. A merged call that throws
 * proves nothing about any single run: each run is then tried alone, in arrival order, and only
 * the caller whose run fails sees the error, and splits, retries or dead-letters it as before.
 * Unless the error is one waiting can fix: then every caller gets it at once and retries itself.
 */
export function groupCommit<E>(inner: BatchProcessor<E>, options: GroupCommitOptions<E>): BatchProcessor<E> {
  const { maxDeliveries, concurrency, merged = (_deliveries, work) => work(), onGroup, isRetriable = () => false } = options;
  let queue: Pending<E>[] = [];
  let inFlight = 0;
  let scheduled = false;

  /** The next group: whole runs from the front of the queue, up to `maxDeliveries` (at least one run). */
  function take(): Pending<E>[] {
    let size = 0;
    let n = 0;
    for (const pending of queue) {
      if (n > 0 && size + pending.run.length > maxDeliveries) break;
      size += pending.run.length;
      n++;
    }
    const group = queue.slice(0, n);
    queue = queue.slice(n);
    return group;
  }

  /** One run by itself; whatever it ends with (a synchronous throw included) reaches its caller. */
  async function alone(p: Pending<E>): Promise<void> {
    try {
      p.resolve(await p.alone());
    } catch (error) {
      p.reject(error);
    }
  }

  async function runGroup(group: readonly Pending<E>[]): Promise<void> {
    const [first] = group;
    if (group.length === 1 && first) return alone(first);
    const deliveries = group.flatMap((p) => p.run);
    let outcomes: readonly DeliveryOutcome[];
    try {
      outcomes = await merged(deliveries, () => inner.process(deliveries));
    } catch (error) {
      if (isRetriable(error)) {
        for (const p of group) p.reject(error);
        return;
      }
      // Which run failed is unknown: each alone, so the failure reaches its own caller only.
      for (const p of group) await alone(p);
      return;
    }
    let at = 0;
    for (const p of group) {
      p.resolve(outcomes.slice(at, at + p.run.length));
      at += p.run.length;
    }
  }

  async function drain(): Promise<void> {
    inFlight++;
    try {
      while (queue.length > 0) {
        const group = take();
        schedule(); // what is left may start a call of its own, up to `concurrency`
        onGroup?.(group.length, group.reduce((n, p) => n + p.run.length, 0));
        await runGroup(group);
      }
    } finally {
      inFlight--;
    }
  }

  // Deferred by one turn of the event loop: the batches of one fetch reach `process` in the same
  // turn (kafkajs starts its workers together), so they all make the first call.
  function schedule(): void {
    if (scheduled || inFlight >= concurrency || queue.length === 0) return;
    scheduled = true;
    setImmediate(() => {
      scheduled = false;
      void drain();
    });
  }

  return {
    handles: (type) => inner.handles(type),
    process(run) {
      return new Promise((resolve, reject) => {
        queue.push({ run, alone: AsyncResource.bind(() => inner.process(run)), resolve, reject });
        schedule();
      });
    },
  };
}
