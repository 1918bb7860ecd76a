import type { Metrics } from '@labelflow/telemetry';

export type ConsumerMetrics = ReturnType<typeof createConsumerMetrics>;

/** Every series the consumer loop reports, made once per loop and shared by its parts. */
export function createConsumerMetrics(metrics: Metrics | undefined) {
  const made = {
    processed: metrics?.counter('consumer_messages_total', 'Consumed messages by outcome', ['topic', 'type', 'outcome']),
    latency: metrics?.histogram('consumer_processing_seconds', 'Time of the processor call that committed the effect (its last try: time spent in earlier failed tries and backoffs is not counted; see consumer_retries_total)', ['topic', 'type']),
    batchSizes: metrics?.histogram('consumer_batch_size', 'Events applied together in one processor call', ['topic'], [1, 2, 5, 10, 20, 50, 100, 200, 500]),
    groupedRuns: metrics?.histogram('consumer_grouped_runs', 'Runs (partition batches) applied together in one processor call by group commit', [], [1, 2, 3, 4, 6, 8, 12, 16, 24, 32]),
    retries: metrics?.counter('consumer_retries_total', 'Processor calls that failed and were retried or split', ['topic', 'kind']),
    duplicates: metrics?.counter('dedup_duplicates_total', 'Duplicate deliveries caught, by the tier that caught them', ['tier']),
    deadLettered: metrics?.counter('consumer_dead_lettered_total', 'Messages sent to the dead-letter topic', ['topic', 'code']),
    ignored: metrics?.counter('consumer_ignored_total', 'Consumed events the service refused, by refusal code', ['topic', 'type', 'code']),
    skipped: metrics?.counter('consumer_skipped_total', 'Messages of event types this service does not react to', ['topic', 'type']),
    crashCount: metrics?.counter('consumer_crashes_total', 'Consumer crashes, by who restarts it (kafkajs itself, or the loop)', ['restart']),
    restartCount: metrics?.counter('consumer_restarts_total', 'Restarts the loop made of a consumer kafkajs would not restart'),
    runningGauge: metrics?.gauge('consumer_running', '1 while the consumer is a member of its group and consuming, else 0'),
    caughtUpGauge: metrics?.gauge('consumer_caught_up_timestamp_seconds', 'Everything produced before this instant was consumed by the group; 0 until this instance saw it caught up once'),
    lag: metrics?.gauge('consumer_lag_messages', "Messages on a partition past the group's committed offset, as of the last progress probe (every member reports the whole group: aggregate with max)", ['group', 'topic', 'partition']),
    probeRuns: metrics?.counter('consumer_progress_probes_total', "Comparisons of the group's committed offsets with the high watermarks, by result", ['result']),
  };
  made.runningGauge?.set(0);
  // Both crash series from the start: a series born at 1 hides its first crash from increase(),
  // so ConsumerCrashLooping would need a fourth crash to see three.
  for (const restart of ['kafkajs', 'loop']) made.crashCount?.inc({ restart }, 0);
  return made;
}
