import type { EachBatchPayload } from 'kafkajs';
import type { Logger } from '@labelflow/telemetry';
import { markDeadLettered, type BatchProcessor, type Delivery, type DeliveryOutcome } from './consumer-batch';
import type { ConsumerMetrics } from './consumer-metrics';
import { MessagingErrors } from './errors';

export interface RetryPolicy {
  readonly initialMs: number;
  readonly maxMs: number;
  /** Failures of a non-retriable kind before the message is dead-lettered. */
  readonly maxAttempts: number;
}

/** How a piece of work on a fetched batch ended: `aborted` when the batch was taken away (rebalance, close) first. */
export type Step = 'done' | 'aborted';

const TRANSIENT_TRIES_BEFORE_SPLIT = 3;
export const defaultRetry: RetryPolicy = { initialMs: 100, maxMs: 5_000, maxAttempts: 5 };
export const defaultIsRetriable = (error: unknown) => (error as { retriable?: boolean } | null | undefined)?.retriable === true;

/**
 * What a processor threw, as an object the retry logic can read `code`, `message` and `retriable`
 * of: a rejection with `undefined`, `null` or a string would otherwise throw a TypeError from
 * inside the catch, escape the loop, and crash-restart the consumer on the same message forever.
 */
export function asThrownObject(thrown: unknown): Error {
  if (thrown instanceof Error) return thrown;
  if (typeof thrown === 'object' && thrown !== null) return thrown as Error;
  return new Error(`the handler threw a non-error: ${String(thrown)}`);
}

export const backoffMs = (retry: RetryPolicy, attempt: number) => Math.min(retry.maxMs, retry.initialMs * 2 ** Math.min(attempt, 16)) * (0.5 + Math.random() / 2);

/** The batch is no longer this consumer's to finish: it stopped, or a rebalance made the batch stale. */
export const stopped = (payload: EachBatchPayload) => !payload.isRunning() || payload.isStale();

/** Waits `ms`, heartbeating so the group keeps the partition; false if the batch was taken away meanwhile. */
export async function waitOrAbort(ms: number, payload: EachBatchPayload): Promise<boolean> {
  const until = Date.now() + ms;
  while (Date.now() < until) {
    if (stopped(payload)) return false;
    await new Promise((r) => setTimeout(r, Math.min(250, until - Date.now())));
    await payload.heartbeat();
  }
  return !stopped(payload);
}

export interface RunApplierDeps<E> {
  readonly processor: BatchProcessor<E>;
  readonly retry: RetryPolicy;
  /** True when waiting can fix the failure: retried without limit, never split. */
  readonly isRetriable: (error: unknown) => boolean;
  readonly metrics: ConsumerMetrics;
  readonly log: Logger;
  /** Counts and logs what became of each delivery of a run the processor applied. */
  readonly record: (deliveries: readonly Delivery<E>[], outcomes: readonly DeliveryOutcome[], started: bigint) => void;
  /** Publishes the delivery's original message to the dead-letter topic, retrying until it is there. */
  readonly deadLetter: (delivery: Delivery<E>, code: string, reason: string, payload: EachBatchPayload) => Promise<Step>;
}

export type ApplyRun<E> = (run: readonly Delivery<E>[], payload: EachBatchPayload, onDone: (last: Delivery<E>) => void) => Promise<Step>;

/**
 * The retry, split and dead-letter policy. A run is applied whole when it can, else split until the
 * failing message stands alone. Transient failures are waited out without splitting: halves would
 * fail just the same. A lone message that keeps failing otherwise is dead-lettered.
 */
export function createRunApplier<E extends { readonly type: string }>(deps: RunApplierDeps<E>): ApplyRun<E> {
  const { processor, retry, isRetriable, log } = deps;
  const { batchSizes, retries, processed } = deps.metrics;
  const backoff = (attempt: number) => backoffMs(retry, attempt);

  const apply: ApplyRun<E> = async (run, payload, onDone) => {
    const topic = payload.batch.topic;
    for (let attempt = 0, poison = 0; ; attempt++) {
      if (stopped(payload)) return 'aborted';
      const started = process.hrtime.bigint();
      try {
        const outcomes = await processor.process(run);
        deps.record(run, outcomes, started);
        batchSizes?.observe({ topic }, run.length);
        onDone(run[run.length - 1]!);
        return 'done';
      } catch (thrown) {
        const error = asThrownObject(thrown);
        const transient = isRetriable(error);
        // A transient failure that outlasts a few tries may belong to one message (a lock it keeps
        // losing): splitting lets the messages before it commit, and order is kept either way.
        if (transient && (run.length === 1 || attempt < TRANSIENT_TRIES_BEFORE_SPLIT)) {
          retries?.inc({ topic, kind: 'transient' });
          log.warn({ err: error, attempt, events: run.length, first: run[0]!.meta.source }, 'processing failed transiently; retrying');
          if (!(await waitOrAbort(backoff(attempt), payload))) return 'aborted';
          continue;
        }
        if (run.length > 1) {
          retries?.inc({ topic, kind: 'split' });
          log.warn({ err: error, events: run.length, first: run[0]!.meta.source }, 'processing a run failed; splitting it to isolate the failing message');
          const half = Math.ceil(run.length / 2);
          if ((await apply(run.slice(0, half), payload, onDone)) === 'aborted') return 'aborted';
          return apply(run.slice(half), payload, onDone);
        }
        const { event, meta } = run[0]!;
        poison++;
        retries?.inc({ topic, kind: 'failure' });
        if (poison >= retry.maxAttempts) {
          const code = (error as { code?: string }).code ?? MessagingErrors.HANDLER_FAILED;
          const step = await deps.deadLetter(run[0]!, code, `handler failed ${poison} times: ${(error as Error).message}`, payload);
          // Counted once it is on the dead-letter topic: an aborted send is delivered (and counted) again.
          if (step === 'done') {
            processed?.inc({ topic, type: event.type, outcome: 'dead_lettered' });
            markDeadLettered(run[0]!, code);
            onDone(run[0]!);
          }
          return step;
        }
        log.warn({ err: error, source: meta.source, type: event.type, attempt: poison }, 'processing failed; retrying');
        if (!(await waitOrAbort(backoff(attempt), payload))) return 'aborted';
      }
    }
  };
  return apply;
}
