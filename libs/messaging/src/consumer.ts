import { Partitioners, type Consumer, type ConsumerRunConfig, type EachBatchPayload, type Kafka, type KafkaMessage, type Producer } from 'kafkajs';
import type { z } from 'zod';
import type { Logger, Metrics } from '@labelflow/telemetry';
import { coordinates, decodeMessage, headersToStrings, type RawMessage } from './codec';
import { MessagingErrors } from './errors';

/** The header every labelflow producer stamps with the event's type, so consumers can skip unread. */
export const EVENT_TYPE_HEADER = 'event-type';

/** What became of one delivered event once its batch committed. */
export type DeliveryOutcome =
  | { readonly status: 'applied' }
  | { readonly status: 'duplicate'; readonly tier: string }
  /** The service refused it (a stale attempt, a cancelled task): `code` is the refusal's stable code. */
  | { readonly status: 'ignored'; readonly code: string; readonly reason: string };

export interface MessageMeta {
  readonly topic: string;
  readonly partition: number;
  readonly offset: string;
  readonly headers: Readonly<Record<string, string>>;
  /** `topic/partition@offset`. */
  readonly source: string;
}

export interface Delivery<E> {
  readonly event: E;
  readonly meta: MessageMeta;
}

export interface TopicBinding<E> {
  readonly topic: string;
  readonly schema: z.ZodType<E>;
}

/**
 * The one port between the Kafka loop and a service's exactly-once shell. `process` applies a run
 * of decoded deliveries atomically (all of them or none) and reports one outcome per delivery, in
 * order; a throw means none was applied. The loop owns everything Kafka: decoding, skipping what
 * the service does not read, retries, isolating a poison message, dead letters and offsets.
 */
export interface BatchProcessor<E> {
  /** False for event types the service never reacts to: skipped before decoding or any round trip. */
  handles(type: string): boolean;
  process(deliveries: readonly Delivery<E>[]): Promise<readonly DeliveryOutcome[]>;
}

export interface RetryPolicy {
  readonly initialMs: number;
  readonly maxMs: number;
  /** Failures of a non-retriable kind before the message is dead-lettered. */
  readonly maxAttempts: number;
}

/**
 * How the loop restarts a consumer after a crash kafkajs does not restart from itself (`restart:
 * false` on its CRASH event: a non-retriable error, such as a JoinGroup the broker refuses).
 */
export interface RestartPolicy {
  /** Wait before the first restart; it doubles with each crash that follows, up to `maxMs`. */
  readonly initialMs: number;
  readonly maxMs: number;
  /** A consumer that ran this long before it crashed starts over from `initialMs`. */
  readonly stableMs: number;
}

/**
 * `running`: a member of its group, consuming. `starting`: joining the group for the first time.
 * `restarting`: it crashed, and kafkajs or the loop is bringing it back. `stopped`: not started yet,
 * or closed.
 */
export type ConsumerState = 'stopped' | 'starting' | 'running' | 'restarting';

export interface ConsumerHealth {
  readonly state: ConsumerState;
  /** When it entered this state (epoch ms). */
  readonly since: number;
  /** Crashes since the loop was created. */
  readonly crashes: number;
  /** Why it is not consuming, for readiness probes and operators; absent while `running`. */
  readonly reason?: string;
}

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
  readonly partitionsConsumedConcurrently?: number;
  readonly sessionTimeoutMs?: number;
  /** Upper bound of a fetch per partition; a batch is at most what one fetch returns. */
  readonly maxBytesPerPartition?: number;
  /** How often the group's progress is compared with the topics' high watermarks (`caughtUpTo`). */
  readonly progressEveryMs?: number;
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

const TRANSIENT_TRIES_BEFORE_SPLIT = 3;
const defaultRetry: RetryPolicy = { initialMs: 100, maxMs: 5_000, maxAttempts: 5 };
const defaultRestart: RestartPolicy = { initialMs: 1_000, maxMs: 30_000, stableMs: 60_000 };
const defaultIsRetriable = (error: unknown) => (error as { retriable?: boolean }).retriable === true;

type Step = 'done' | 'aborted';

/** One fetched message, read as far as it can be: skipped, decoded, or unreadable. */
type Item<E> =
  | { readonly kind: 'skip'; readonly raw: RawMessage; readonly type: string }
  | { readonly kind: 'event'; readonly raw: RawMessage; readonly delivery: Delivery<E> }
  | { readonly kind: 'invalid'; readonly raw: RawMessage; readonly code: string; readonly message: string };

/**
 * The consumer shell every service uses. Per fetched batch: skip what the service does not read,
 * decode the rest, hand each run of decoded events to the processor as one unit, and only then
 * resolve the offsets. An offset is never committed for a message whose effect did not commit,
 * was not proven a duplicate, and was not dead-lettered.
 *
 * A run that fails for a transient reason (database or broker away) is retried with backoff,
 * holding the partition; a message that fails transiently is retried for as long as it takes. A run
 * that fails otherwise is split in halves until the failure is one message: its neighbours commit
 * without it, and it alone is retried and dead-lettered.
 *
 * A crashed consumer (kafkajs's CRASH event) is never left for dead: `health()` reports it as
 * `restarting` until it has joined its group again. kafkajs restarts it itself after a retriable
 * error; after any other (`restart: false`) the loop restarts it, with backoff (`restart`), each
 * crash logged and counted (`consumer_crashes_total`, `consumer_restarts_total`).
 */
export function createConsumerLoop<E extends { readonly type: string }>(options: ConsumerLoopOptions<E>): ConsumerLoop {
  const { kafka, groupId, bindings, processor, deadLetterTopic, logger, metrics } = options;
  const retry = { ...defaultRetry, ...options.retry };
  const restartPolicy = { ...defaultRestart, ...options.restart };
  const isRetriable = options.isRetriable ?? defaultIsRetriable;
  const schemas = new Map(bindings.map((b) => [b.topic, b.schema]));
  const log = logger.child({ component: 'consumer', groupId });
  const consumer = kafka.consumer({
    groupId,
    sessionTimeout: options.sessionTimeoutMs ?? 30_000,
    heartbeatInterval: Math.min(3_000, Math.floor((options.sessionTimeoutMs ?? 30_000) / 3)),
    allowAutoTopicCreation: false,
    ...(options.maxBytesPerPartition ? { maxBytesPerPartition: options.maxBytesPerPartition } : {}),
  });
  const dlqProducer: Producer = kafka.producer({ idempotent: true, maxInFlightRequests: 1, allowAutoTopicCreation: false, createPartitioner: Partitioners.DefaultPartitioner });

  const processed = metrics?.counter('consumer_messages_total', 'Consumed messages by outcome', ['topic', 'type', 'outcome']);
  const latency = metrics?.histogram('consumer_processing_seconds', 'Time from receipt to committed effect', ['topic', 'type']);
  const batchSizes = metrics?.histogram('consumer_batch_size', 'Events applied together in one processor call', ['topic'], [1, 2, 5, 10, 20, 50, 100, 200, 500]);
  const retries = metrics?.counter('consumer_retries_total', 'Processor calls that failed and were retried or split', ['topic', 'kind']);
  const duplicates = metrics?.counter('dedup_duplicates_total', 'Duplicate deliveries caught, by the tier that caught them', ['tier']);
  const deadLettered = metrics?.counter('consumer_dead_lettered_total', 'Messages sent to the dead-letter topic', ['topic', 'code']);
  const ignored = metrics?.counter('consumer_ignored_total', 'Consumed events the service refused, by refusal code', ['topic', 'type', 'code']);
  const skipped = metrics?.counter('consumer_skipped_total', 'Messages of event types this service does not react to', ['topic', 'type']);
  const crashCount = metrics?.counter('consumer_crashes_total', 'Consumer crashes, by who restarts it (kafkajs itself, or the loop)', ['restart']);
  const restartCount = metrics?.counter('consumer_restarts_total', 'Restarts the loop made of a consumer kafkajs would not restart');
  const runningGauge = metrics?.gauge('consumer_running', '1 while the consumer is a member of its group and consuming, else 0');
  runningGauge?.set(0);

  const backoff = (attempt: number) => Math.min(retry.maxMs, retry.initialMs * 2 ** Math.min(attempt, 16)) * (0.5 + Math.random() / 2);
  const stopped = (payload: EachBatchPayload) => !payload.isRunning() || payload.isStale();

  async function waitOrAbort(ms: number, payload: EachBatchPayload): Promise<boolean> {
    const until = Date.now() + ms;
    while (Date.now() < until) {
      if (stopped(payload)) return false;
      await new Promise((r) => setTimeout(r, Math.min(250, until - Date.now())));
      await payload.heartbeat();
    }
    return !stopped(payload);
  }

  /**
   * Publishes the message to the dead-letter topic, retrying until it is there: an unreachable broker
   * must not let the consumer skip it. The one failure that retrying cannot fix is a message the
   * dead-letter topic refuses as too large (it arrived compressed, or the topic's limit is lower):
   * then the record goes without its value, with every header and the source coordinates, where
   * the original can still be read.
   */
  async function deadLetter(raw: RawMessage, code: string, reason: string, payload: EachBatchPayload): Promise<Step> {
    let omitValue = false;
    for (let attempt = 0; ; attempt++) {
      try {
        await dlqProducer.send({
          topic: deadLetterTopic,
          acks: -1,
          messages: [{
            key: raw.key,
            value: omitValue ? null : raw.value,
            headers: {
              ...raw.headers,
              ...(omitValue ? { 'dlq-value-omitted': 'MESSAGE_TOO_LARGE' } : {}),
              'dlq-error-code': code,
              'dlq-error-message': reason.slice(0, 4000),
              'dlq-source-topic': raw.topic,
              'dlq-source-partition': String(raw.partition),
              'dlq-source-offset': raw.offset,
              'dlq-consumer-group': groupId,
              'dlq-failed-at': new Date().toISOString(),
            },
          }],
        });
        deadLettered?.inc({ topic: raw.topic, code });
        log.error({ source: coordinates(raw), code, reason, deadLetterTopic }, 'message dead-lettered');
        return 'done';
      } catch (error) {
        if (!omitValue && isTooLarge(error)) {
          log.warn({ source: coordinates(raw), bytes: raw.value?.length }, 'dead-letter topic refused the message as too large; sending it without its value');
          omitValue = true;
          continue;
        }
        log.warn({ err: error, source: coordinates(raw) }, 'dead-letter publish failed; retrying');
        if (!(await waitOrAbort(backoff(attempt), payload))) return 'aborted';
      }
    }
  }

  /**
   * Never throws: a message that cannot even be read is dead-lettered like any other poison. A throw
   * here would escape the batch before any offset is resolved, and kafkajs would refetch the same
   * batch forever. The type header lets a message the service never reads skip JSON and schema
   * work; without the header (a foreign producer) the decoded body decides.
   */
  function prepare(topic: string, partition: number, message: KafkaMessage): Item<E> {
    const raw: RawMessage = { topic, partition, offset: message.offset, key: message.key, value: message.value, headers: {} };
    try {
      const readable = { ...raw, headers: headersToStrings(message.headers) };
      const typeHeader = readable.headers[EVENT_TYPE_HEADER];
      if (typeHeader !== undefined && !processor.handles(typeHeader)) return { kind: 'skip', raw: readable, type: typeHeader };
      const schema = schemas.get(topic);
      if (!schema) return { kind: 'invalid', raw: readable, code: MessagingErrors.UNBOUND_TOPIC, message: `no schema bound for topic ${topic}` };
      const decoded = decodeMessage(schema, readable);
      if (!decoded.ok) return { kind: 'invalid', raw: readable, ...decoded.reason };
      if (!processor.handles(decoded.event.type)) return { kind: 'skip', raw: readable, type: decoded.event.type };
      const meta: MessageMeta = { topic, partition, offset: message.offset, headers: readable.headers, source: coordinates(readable) };
      return { kind: 'event', raw: readable, delivery: { event: decoded.event, meta } };
    } catch (error) {
      return { kind: 'invalid', raw, code: MessagingErrors.DECODE_FAILED, message: `message could not be read: ${(error as Error).message}` };
    }
  }

  function record(deliveries: readonly Delivery<E>[], outcomes: readonly DeliveryOutcome[], started: bigint): void {
    const seconds = Number(process.hrtime.bigint() - started) / 1e9;
    deliveries.forEach(({ event, meta }, i) => {
      const outcome = outcomes[i] ?? { status: 'applied' };
      processed?.inc({ topic: meta.topic, type: event.type, outcome: outcome.status });
      latency?.observe({ topic: meta.topic, type: event.type }, seconds);
      if (outcome.status === 'duplicate') duplicates?.inc({ tier: outcome.tier });
      if (outcome.status !== 'ignored') return;
      ignored?.inc({ topic: meta.topic, type: event.type, code: outcome.code });
      log.debug({ source: meta.source, type: event.type, code: outcome.code, reason: outcome.reason }, 'event ignored');
    });
  }

  /**
   * Applies a run of deliveries: whole when it can, else split until the failing message stands
   * alone. Transient failures are waited out without splitting: halves would fail just the same.
   */
  async function apply(run: readonly Delivery<E>[], payload: EachBatchPayload, onDone: (last: Delivery<E>) => void): Promise<Step> {
    const topic = payload.batch.topic;
    for (let attempt = 0, poison = 0; ; attempt++) {
      if (stopped(payload)) return 'aborted';
      const started = process.hrtime.bigint();
      try {
        const outcomes = await processor.process(run);
        record(run, outcomes, started);
        batchSizes?.observe({ topic }, run.length);
        onDone(run[run.length - 1]!);
        return 'done';
      } catch (error) {
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
          processed?.inc({ topic, type: event.type, outcome: 'dead_lettered' });
          const code = (error as { code?: string }).code ?? MessagingErrors.HANDLER_FAILED;
          const step = await deadLetter(rawOf(run[0]!), code, `handler failed ${poison} times: ${(error as Error).message}`, payload);
          if (step === 'done') onDone(run[0]!);
          return step;
        }
        log.warn({ err: error, source: meta.source, type: event.type, attempt: poison }, 'processing failed; retrying');
        if (!(await waitOrAbort(backoff(attempt), payload))) return 'aborted';
      }
    }
  }

  const raws = new WeakMap<Delivery<E>, RawMessage>();
  const rawOf = (d: Delivery<E>): RawMessage => raws.get(d)!;

  async function processBatch(payload: EachBatchPayload): Promise<void> {
    const { batch } = payload;
    const items = batch.messages.map((m) => prepare(batch.topic, batch.partition, m));
    let run: Delivery<E>[] = [];
    const resolve = (offset: string) => payload.resolveOffset(offset);
    // Runs of decodable events go to the processor together; a skipped or unreadable message in
    // between only needs its offset, once everything before it is done.
    const flush = async (): Promise<Step> => {
      if (run.length === 0) return 'done';
      const current = run;
      run = [];
      const step = await apply(current, payload, (last) => resolve(last.meta.offset));
      if (step === 'done') await payload.heartbeat();
      return step;
    };
    for (const item of items) {
      if (item.kind === 'event') {
        raws.set(item.delivery, item.raw);
        run.push(item.delivery);
        continue;
      }
      if ((await flush()) === 'aborted') return;
      if (item.kind === 'skip') {
        skipped?.inc({ topic: batch.topic, type: item.type });
      } else {
        processed?.inc({ topic: batch.topic, type: 'invalid', outcome: 'invalid' });
        log.warn({ source: coordinates(item.raw), code: item.code, reason: item.message }, 'invalid message skipped');
        if ((await deadLetter(item.raw, item.code, item.message, payload)) === 'aborted') return;
      }
      resolve(item.raw.offset);
    }
    if ((await flush()) === 'aborted') return;
    await payload.commitOffsetsIfNecessary();
  }

  // Progress probes: the topics' high watermarks taken at an instant, then compared with the
  // group's committed offsets until the group has passed them. The newest probe it passed is how
  // far the group has caught up: everything produced before that instant was consumed.
  const admin = kafka.admin();
  const probes: { readonly at: number; readonly highs: ReadonlyMap<string, number> }[] = [];
  let caughtUp: number | undefined;
  let progressTimer: NodeJS.Timeout | undefined;
  const caughtUpGauge = metrics?.gauge('consumer_caught_up_timestamp_seconds', 'Everything produced before this instant was consumed by the group');
  const probeRuns = metrics?.counter('consumer_progress_probes_total', 'Comparisons of the group\'s committed offsets with the high watermarks, by result', ['result']);
  async function probeProgress(): Promise<void> {
    const at = Date.now();
    const highs = new Map<string, number>();
    for (const { topic } of bindings) {
      for (const p of await admin.fetchTopicOffsets(topic)) highs.set(`${topic}/${p.partition}`, Number(p.high));
    }
    probes.push({ at, highs });
    const committed = new Map<string, number>();
    for (const t of await admin.fetchOffsets({ groupId, topics: bindings.map((b) => b.topic) })) {
      for (const p of t.partitions) committed.set(`${t.topic}/${p.partition}`, Number(p.offset));
    }
    while (probes.length > 0 && [...probes[0]!.highs].every(([tp, high]) => high <= 0 || (committed.get(tp) ?? -1) >= high)) {
      caughtUp = probes.shift()!.at;
      caughtUpGauge?.set(caughtUp / 1000);
    }
    // Bounded: a group far behind keeps only the newest probes, and catches up to those.
    if (probes.length > 120) probes.splice(0, probes.length - 120);
  }
  function scheduleProgress(): void {
    progressTimer = setTimeout(() => {
      probeProgress()
        .then(() => probeRuns?.inc({ result: 'ok' }))
        .catch((error: Error) => {
          probeRuns?.inc({ result: 'failed' });
          log.debug({ err: error }, 'progress probe failed; trying again');
        })
        .finally(() => {
          if (progressTimer) scheduleProgress();
        });
    }, options.progressEveryMs ?? 1_000);
    progressTimer.unref();
  }

  // Liveness. kafkajs emits GROUP_JOIN after every join (the first, a rebalance, a restart) and
  // CRASH when the consumer died; after a crash with `restart: false` nothing brings it back but us.
  const runConfig: ConsumerRunConfig = {
    eachBatchAutoResolve: false,
    autoCommit: true,
    autoCommitInterval: 1_000,
    partitionsConsumedConcurrently: options.partitionsConsumedConcurrently ?? 3,
    eachBatch: processBatch,
  };
  let state: ConsumerState = 'stopped';
  let since = Date.now();
  let crashes = 0;
  let lastCrash: { readonly error: string; readonly by: 'kafkajs' | 'loop' } | undefined;
  let runningSince: number | undefined;
  let restartAttempt = 0;
  let nextRestartAt: number | undefined;
  let restartTimer: NodeJS.Timeout | undefined;
  let restarting: Promise<void> | undefined;
  let closed = false;
  const enter = (next: ConsumerState) => {
    if (state !== next) since = Date.now();
    state = next;
    runningGauge?.set(next === 'running' ? 1 : 0);
  };
  const restartDelay = (attempt: number) => Math.min(restartPolicy.maxMs, restartPolicy.initialMs * 2 ** Math.min(attempt, 16));

  consumer.on(consumer.events.GROUP_JOIN, () => {
    if (closed || state === 'running') return;
    const recovered = state === 'restarting';
    runningSince = Date.now();
    nextRestartAt = undefined;
    enter('running');
    if (recovered) log.info({ crashes, downForMs: Date.now() - since }, 'consumer running again after a crash');
  });

  consumer.on(consumer.events.CRASH, ({ payload }) => {
    if (closed) return;
    const { error, restart } = payload;
    crashes++;
    // Backoff grows over a crash loop, and starts over once a run proved stable.
    if (runningSince !== undefined && Date.now() - runningSince >= restartPolicy.stableMs) restartAttempt = 0;
    runningSince = undefined;
    lastCrash = { error: `${error.name}: ${error.message}`, by: restart ? 'kafkajs' : 'loop' };
    crashCount?.inc({ restart: lastCrash.by });
    enter('restarting');
    if (restart) {
      log.error({ err: error, crashes }, 'consumer crashed; kafkajs restarts it');
      return;
    }
    const delay = restartDelay(restartAttempt++);
    log.error({ err: error, crashes, attempt: restartAttempt, restartInMs: delay }, 'consumer crashed and kafkajs will not restart it; restarting it');
    scheduleRestart(delay);
  });

  function scheduleRestart(delay: number): void {
    clearTimeout(restartTimer);
    nextRestartAt = Date.now() + delay;
    restartTimer = setTimeout(() => {
      restartTimer = undefined;
      restarting = restartNow().finally(() => (restarting = undefined));
    }, delay);
  }

  /** A join the broker refuses again crashes again: the CRASH listener schedules the next try. */
  async function restartNow(): Promise<void> {
    if (closed) return;
    nextRestartAt = undefined;
    restartCount?.inc();
    log.warn({ attempt: restartAttempt, crashes }, 'restarting the crashed consumer');
    try {
      await consumer.connect();
      if (closed) return;
      await consumer.run(runConfig);
    } catch (error) {
      if (closed) return;
      const delay = restartDelay(restartAttempt++);
      lastCrash = { error: `${(error as Error).name}: ${(error as Error).message}`, by: 'loop' };
      log.error({ err: error, attempt: restartAttempt, restartInMs: delay }, 'restarting the consumer failed; trying again');
      scheduleRestart(delay);
    }
  }

  function health(): ConsumerHealth {
    const base = { state, since, crashes };
    switch (state) {
      case 'running':
        return base;
      case 'stopped':
        return { ...base, reason: closed ? 'the consumer was closed' : 'the consumer was not started' };
      case 'starting':
        return { ...base, reason: 'the consumer is joining its group' };
      case 'restarting': {
        const how = lastCrash?.by === 'kafkajs'
          ? 'kafkajs is restarting it'
          : nextRestartAt !== undefined
            ? `restart ${restartAttempt} in ${Math.max(0, nextRestartAt - Date.now())} ms`
            : `restart ${restartAttempt} under way`;
        return { ...base, reason: `the consumer crashed and has not consumed for ${Date.now() - since} ms (${crashes} ${crashes === 1 ? 'crash' : 'crashes'}, the last: ${lastCrash?.error ?? 'unknown error'}); ${how}` };
      }
    }
  }

  return {
    consumer,
    caughtUpTo: () => caughtUp,
    health,
    async start() {
      enter('starting');
      await admin.connect();
      scheduleProgress();
      await dlqProducer.connect();
      await consumer.connect();
      for (const { topic } of bindings) await consumer.subscribe({ topic, fromBeginning: true });
      // Resolves once the consumer joined its group, or crashed trying (then it is `restarting`).
      await consumer.run(runConfig);
    },
    async close() {
      closed = true;
      clearTimeout(restartTimer);
      await restarting;
      clearTimeout(progressTimer);
      progressTimer = undefined;
      try {
        await consumer.disconnect();
        await dlqProducer.disconnect();
        await admin.disconnect();
      } finally {
        enter('stopped');
      }
    },
  };
}

/** kafkajs reports the broker's MESSAGE_TOO_LARGE / RECORD_LIST_TOO_LARGE directly or wrapped. */
function isTooLarge(error: unknown): boolean {
  for (let e = error as { type?: unknown; cause?: unknown; originalError?: unknown } | undefined, depth = 0; e && depth < 5; depth++) {
    if (e.type === 'MESSAGE_TOO_LARGE' || e.type === 'RECORD_LIST_TOO_LARGE') return true;
    e = (e.originalError ?? e.cause) as typeof e;
  }
  return false;
}
