import { type Consumer, type ConsumerRunConfig, type Kafka, type Producer } from 'kafkajs';
import type { Logger, Metrics } from '@labelflow/telemetry';
import type { RawMessage } from './codec';
import { createBatchHandler, linkedToDeliveries, recordOutcomes, type BatchProcessor, type Delivery, type TopicBinding } from './consumer-batch';
import { createConsumerMetrics } from './consumer-metrics';
import { createProgressProbe, kafkajsOffsets, type OffsetsSource } from './consumer-progress';
import { createRunApplier, defaultIsRetriable, defaultRetry, type RetryPolicy } from './consumer-retry';
import { defaultRestart, superviseConsumer, type ConsumerHealth, type RestartPolicy } from './consumer-supervision';
import { createDeadLetter } from './dead-letter';
import { defaultGroupCommit, groupCommit, type GroupCommitOptions } from './group-commit';
import { IdleLongPollSetup, useIdleLongPoll } from './kafkajs-idle-fetch';
import { createOffsetCommitter, type NextOffset } from './offset-committer';
import { KeyPartitioner } from './partitioner';

export interface ConsumerLoopOptions<E> {
  readonly kafka: Kafka;
  readonly groupId: string;
  readonly bindings: readonly TopicBinding<E>[];
  readonly processor: BatchProcessor<E>;
  /** Dead-letter topic for this consumer: poison messages land here with their original bytes. */
  readonly deadLetterTopic: string;
  readonly logger: Logger;
  readonly metrics?: Metrics;
  /** True when waiting can fix the failure (database or broker down): retried without limit, never split. */
  readonly isRetriable?: (error: unknown) => boolean;
  readonly retry?: Partial<RetryPolicy>;
  /** Partition batches handed to eachBatch at once (default 32 with group commit, else 3). */
  readonly partitionsConsumedConcurrently?: number;
  /**
   * Runs from several partitions that arrive together go to the processor as one call (one
   * transaction): see group-commit.ts. `false` gives each partition's run its own call.
   */
  readonly groupCommit?: Partial<Pick<GroupCommitOptions<unknown>, 'maxDeliveries' | 'concurrency'>> | false;
  readonly sessionTimeoutMs?: number;
  /** Upper bound of a fetch per partition; a batch is at most what one fetch returns. */
  readonly maxBytesPerPartition?: number;
  /** A fetch returns once this many bytes are ready, or after `maxWaitTimeInMs` (kafkajs defaults: 1 byte, 5 s). */
  readonly minBytes?: number;
  readonly maxWaitTimeInMs?: number;
  /**
   * The idle long poll (kafkajs-idle-fetch.ts): after `idleAfterEmpty` fetches in a row brought no
   * message, the next asks for any message and waits up to `idleWaitMs`; once one brings messages,
   * `minBytes` and `maxWaitTimeInMs` hold again. Off when absent or 0.
   */
  readonly idleWaitMs?: number;
  /** Empty fetches in a row before the long poll (default 40: 2 s of silence at 50 ms a fetch). */
  readonly idleAfterEmpty?: number;
  /** How often the group's progress is compared with the topics' high watermarks (`caughtUpTo`). */
  readonly progressEveryMs?: number;
  /**
   * Where the progress probe reads offsets: `createOffsetsReader` (three requests a probe), ready
   * and closed by the caller. Default: a kafkajs admin of `kafka`, opened and closed by the loop,
   * about four requests per topic a probe.
   */
  readonly offsets?: OffsetsSource;
  /** Restarts after a crash kafkajs does not restart from (default 1 s doubling to 30 s, reset after 60 s up). */
  readonly restart?: Partial<RestartPolicy>;
}

export interface ConsumerLoop {
  start(): Promise<void>;
  close(): Promise<void>;
  readonly consumer: Consumer;
  /**
   * The latest instant (epoch ms) before which every message on the bound topics has been
   * consumed and committed by the whole group; undefined until that is known. A deadline that is
   * due at T may be judged only once this reaches T: the events produced before T are then in the
   * state it reads.
   */
  caughtUpTo(): number | undefined;
  /** Whether the consumer is consuming right now, and why not when it is not (see ConsumerState). */
  health(): ConsumerHealth;
}

/**
 * The consumer shell every service uses. Per fetched batch: skip what the service does not read,
 * decode the rest, hand each run of decoded events to the processor as one unit, and only then
 * resolve the offsets (consumer-batch.ts). An offset is never committed for a message whose effect
 * did not commit, was not proven a duplicate, and was not dead-lettered.
 *
 * A run that fails for a transient reason (database or broker away) is retried with backoff,
 * holding the partition; a message that fails transiently is retried for as long as it takes. A run
 * that fails otherwise is split in halves until the failure is one message: its neighbours commit
 * without it, and it alone is retried and dead-lettered (consumer-retry.ts, dead-letter.ts).
 *
 * A crashed consumer (kafkajs's CRASH event) is never left for dead: `health()` reports it as
 * `restarting` until it has joined its group again. kafkajs restarts it itself after a retriable
 * error; after any other (`restart: false`) the loop restarts it, with backoff (`restart`), each
 * crash logged and counted (consumer-supervision.ts). How far the group has caught up is probed
 * on the side (consumer-progress.ts).
 */
export function createConsumerLoop<E extends { readonly type: string }>(options: ConsumerLoopOptions<E>): ConsumerLoop {
  const { kafka, groupId, bindings, deadLetterTopic, logger } = options;
  const retry = { ...defaultRetry, ...options.retry };
  const log = logger.child({ component: 'consumer', groupId });
  const metrics = createConsumerMetrics(options.metrics);
  const grouping = options.groupCommit === false ? undefined : { ...defaultGroupCommit, ...options.groupCommit };
  const isRetriable = options.isRetriable ?? defaultIsRetriable;
  const processor = grouping
    ? groupCommit(options.processor, { ...grouping, merged: linkedToDeliveries, onGroup: (runs) => metrics.groupedRuns?.observe(runs), isRetriable })
    : options.processor;
  const consumer = kafka.consumer({
    groupId,
    sessionTimeout: options.sessionTimeoutMs ?? 30_000,
    heartbeatInterval: Math.min(3_000, Math.floor((options.sessionTimeoutMs ?? 30_000) / 3)),
    allowAutoTopicCreation: false,
    ...(options.maxBytesPerPartition ? { maxBytesPerPartition: options.maxBytesPerPartition } : {}),
    ...(options.minBytes ? { minBytes: options.minBytes } : {}),
    ...(options.maxWaitTimeInMs ? { maxWaitTimeInMs: options.maxWaitTimeInMs } : {}),
  });
  const idlePoll = options.idleWaitMs ? useIdleLongPoll(groupId, { waitMs: options.idleWaitMs, afterEmpty: options.idleAfterEmpty ?? 40 }) : undefined;
  if (idlePoll && idlePoll.setup !== IdleLongPollSetup.applied) log.warn('kafkajs is not the version its idle long poll was written for; the consumer fetches as kafkajs would');
  // Not idempotent: kafkajs rolls an idempotent producer's sequence numbers back after a request
  // that timed out, and if that request had in fact been written, the broker takes the next dead
  // letter for its duplicate and drops it, while the send succeeds and the offset moves on. A
  // dead letter written twice costs nothing (a replay is deduplicated); one dropped is a lost message.
  const dlqProducer: Producer = kafka.producer({ idempotent: false, maxInFlightRequests: 1, allowAutoTopicCreation: false, createPartitioner: KeyPartitioner });
  // The loop's own admin only when no offsets source was given.
  const admin = options.offsets ? undefined : kafka.admin();
  const offsetsSource = options.offsets ?? kafkajsOffsets(admin ?? kafka.admin());

  const deadLetter = createDeadLetter({ producer: dlqProducer, topic: deadLetterTopic, groupId, retry, metrics, log });
  const raws = new WeakMap<Delivery<E>, RawMessage>();
  const apply = createRunApplier<E>({
    processor,
    retry,
    isRetriable,
    metrics,
    log,
    record: (deliveries, outcomes, started) => recordOutcomes({ metrics, log }, deliveries, outcomes, started),
    deadLetter: (delivery, code, reason, payload) => deadLetter(raws.get(delivery)!, code, reason, payload),
  });
  const offsets = createOffsetCommitter({ log });
  // A new assignment: what this member resolved and did not commit is the partitions' new owners' to commit.
  // Whether kafkajs is consuming: once it stops, `commitOffsets` resolves without committing.
  let consuming = false;
  consumer.on(consumer.events.GROUP_JOIN, () => {
    consuming = true;
    offsets.reset();
  });
  consumer.on(consumer.events.STOP, () => (consuming = false));
  // A fetch of nothing but control records or aborted records never reaches eachBatch: kafkajs
  // resolves it itself and commits it only with auto-commit on. Everything before it on the
  // partition was resolved (kafkajs fetches from there), so it is committed here, or the group
  // would stay behind a transactional producer's last commit marker for good.
  consumer.on(consumer.events.END_BATCH_PROCESS, ({ payload }) => {
    if (payload.batchSize !== 0 || payload.lastOffset === undefined) return;
    offsets.resolved(payload.topic, payload.partition, payload.lastOffset);
    // A sender that fails once kafkajs stopped, so the offsets it carries stay for the next owner
    // to read again (and the inbox to drop) instead of being taken for committed.
    const send = Object.assign(
      async (next: readonly NextOffset[]) => {
        if (!consuming) throw new Error('the consumer is not consuming');
        await consumer.commitOffsets(next.map((o) => ({ ...o })));
      },
      { usable: () => consuming },
    );
    void offsets.commit(send);
  });
  const runConfig: ConsumerRunConfig = {
    eachBatchAutoResolve: false,
    // Committed by the loop (offset-committer.ts): one request per batch done, shared by every batch done meanwhile.
    autoCommit: false,
    // With group commit, a worker per partition lets a whole fetch reach the processor at once.
    partitionsConsumedConcurrently: options.partitionsConsumedConcurrently ?? (grouping ? 32 : 3),
    eachBatch: createBatchHandler<E>({ processor, bindings, metrics, log, apply, deadLetter, raws, offsets }),
  };
  const progress = createProgressProbe({ source: offsetsSource, groupId, topics: bindings.map((b) => b.topic), everyMs: options.progressEveryMs ?? 1_000, metrics, log });
  const supervision = superviseConsumer({ consumer, runConfig, policy: { ...defaultRestart, ...options.restart }, metrics, log });

  return {
    consumer,
    caughtUpTo: progress.caughtUpTo,
    health: supervision.health,
    async start() {
      supervision.enter('starting');
      await admin?.connect();
      progress.start();
      await dlqProducer.connect();
      await consumer.connect();
      for (const { topic } of bindings) await consumer.subscribe({ topic, fromBeginning: true });
      // Resolves once the consumer joined its group, or crashed trying (then it is `restarting`).
      await consumer.run(runConfig);
    },
    async close() {
      // First: a retry due while the clients disconnect (or after a disconnect that ran out of
      // time) would reconnect them. What is left uncommitted is redelivered, then deduplicated.
      offsets.close();
      await supervision.close();
      progress.stop();
      try {
        await consumer.disconnect();
        await dlqProducer.disconnect();
        await admin?.disconnect();
      } finally {
        idlePoll?.release();
        supervision.enter('stopped');
      }
    },
  };
}
