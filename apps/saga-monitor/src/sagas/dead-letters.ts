import { toStorableText, TopicOwners } from '@labelflow/contracts';
import { createConsumerMetrics, createKafka, defaultRestart, ensureTopics, superviseConsumer, type SupervisedRunConfig } from '@labelflow/messaging';
import { deadLetterTopic, hasJsonStringLongerThan, isTransientDbError, kafkaSecurity, V8_LENGTH_HASHED_STRING, type Lifecycle, type Pool, type Queryable } from '@labelflow/service-kit';
import type { Logger, Metrics } from '@labelflow/telemetry';
import type { SagaMonitorConfig } from '../config';

/** Headers the consumer loop writes on every dead letter (libs/messaging/src/dead-letter.ts). */
const Dlq = { code: 'dlq-error-code', message: 'dlq-error-message', sourceTopic: 'dlq-source-topic', sourcePartition: 'dlq-source-partition', sourceOffset: 'dlq-source-offset', failedAt: 'dlq-failed-at' } as const;

export interface DeadLetterRow {
  readonly topic: string;
  readonly partition: number;
  readonly offset: string;
  readonly service: string;
  readonly taskId: string | null;
  /** The project its body names, when readable: a letter's key alone ties it to a task, and anyone who can write to a topic chooses the key. */
  readonly projectId: string | null;
  readonly eventId: string | null;
  readonly eventType: string | null;
  readonly code: string;
  readonly reason: string;
  readonly source: string | null;
  readonly failedAt: string | null;
}

type Headers = Readonly<Record<string, Buffer | string | (Buffer | string)[] | undefined>>;
const header = (headers: Headers | undefined, name: string): string | undefined => {
  const value = headers?.[name];
  const one = Array.isArray(value) ? value[0] : value;
  return one === undefined ? undefined : one.toString();
};
const TASK_ID = /^[1-9][0-9]{0,18}$/;
const PROJECT_ID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/**
 * Cut, then made storable: a dead letter's text quotes what could not be read (V8's JSON error
 * quotes the bytes, NUL included), and one row PostgreSQL refuses would stop the follower on its
 * partition for good, every later dead letter unrecorded.
 */
const text = (value: string, max: number): string => toStorableText(value.slice(0, max));

/**
 * An instant PostgreSQL takes as it is, or none: `Date.parse` alone accepts what timestamptz
 * refuses ("1" is read as a date, and year 0000, a negative or a five-digit year come back out of
 * toISOString as no timestamptz input takes).
 */
const instant = (value: string | undefined): string | null => {
  const ms = value === undefined ? Number.NaN : Date.parse(value);
  if (Number.isNaN(ms)) return null;
  const iso = new Date(ms).toISOString();
  return /^\d{4}-/.test(iso) && !iso.startsWith('0000') ? iso : null;
};

/**
 * What the timeline keeps of one dead letter. The message may be anything (a dead letter is often
 * one that could not be read): the task is its key when that is a task id, the event its value
 * when that is readable JSON, the type its `event-type` header otherwise.
 */
export function readDeadLetter(topic: string, partition: number, message: { offset: string; key: Buffer | null; value: Buffer | null; headers?: Headers }, prefix: string): DeadLetterRow {
  const key = message.key?.toString() ?? null;
  let body: { id?: unknown; type?: unknown; taskId?: unknown; projectId?: unknown } = {};
  try {
    // A letter is often what a consumer refused to parse: one of long keys of one length would
    // make JSON.parse quadratic here too (plumbing's json-guard), so it is read by its headers alone.
    const readable = message.value !== null && !hasJsonStringLongerThan(message.value, V8_LENGTH_HASHED_STRING);
    const parsed: unknown = readable && message.value ? JSON.parse(message.value.toString()) : {};
    if (parsed !== null && typeof parsed === 'object') body = parsed;
  } catch {
    // Not JSON: the headers and the key still say what it was.
  }
  const taskId = key !== null && TASK_ID.test(key) ? key : typeof body.taskId === 'string' && TASK_ID.test(body.taskId) ? body.taskId : null;
  const sourceTopic = header(message.headers, Dlq.sourceTopic);
  const eventType = typeof body.type === 'string' ? body.type : header(message.headers, 'event-type');
  return {
    topic,
    partition,
    offset: message.offset,
    service: topic.slice(prefix.length + 1, -'.dlq'.length),
    taskId,
    projectId: typeof body.projectId === 'string' && PROJECT_ID.test(body.projectId) ? body.projectId.toLowerCase() : null,
    eventId: typeof body.id === 'string' ? text(body.id, 64) : null,
    eventType: eventType === undefined ? null : text(eventType, 100),
    code: text(header(message.headers, Dlq.code) ?? 'UNKNOWN', 100),
    reason: text(header(message.headers, Dlq.message) ?? '', 4000),
    source: sourceTopic ? text(`${sourceTopic}/${header(message.headers, Dlq.sourcePartition) ?? '?'}@${header(message.headers, Dlq.sourceOffset) ?? '?'}`, 300) : null,
    failedAt: instant(header(message.headers, Dlq.failedAt)),
  };
}

/**
 * Records a dead letter; false when it was recorded before (a re-read after a restart). A letter
 * recorded before the monitor kept projects (migration 5) gets its project when read again (a
 * replay of the follower's group), without counting as new.
 */
export async function recordDeadLetter(db: Queryable, d: DeadLetterRow): Promise<boolean> {
  const { rows } = await db.query<{ inserted: boolean }>(
    `INSERT INTO dead_letters (topic, partition, "offset", service, task_id, project_id, event_id, event_type, code, reason, source, failed_at)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)
     ON CONFLICT (topic, partition, "offset") DO UPDATE SET project_id = EXCLUDED.project_id WHERE dead_letters.project_id IS NULL AND EXCLUDED.project_id IS NOT NULL
     RETURNING (xmax = 0) AS inserted`,
    [d.topic, d.partition, d.offset, d.service, d.taskId, d.projectId, d.eventId, d.eventType, d.code, d.reason, d.source, d.failedAt],
  );
  return rows[0]?.inserted === true;
}

export async function deadLettersOf(db: Queryable, taskId: string): Promise<DeadLetterRow[]> {
  const { rows } = await db.query<{ topic: string; partition: number; offset: string; service: string; task_id: string | null; project_id: string | null; event_id: string | null; event_type: string | null; code: string; reason: string; source: string | null; failed_at: Date | null }>(
    `SELECT topic, partition, "offset"::text AS offset, service, task_id, project_id, event_id, event_type, code, reason, source, failed_at FROM dead_letters WHERE task_id = $1 ORDER BY recorded_at, topic, partition, "offset"`,
    [taskId],
  );
  return rows.map((r) => ({ topic: r.topic, partition: r.partition, offset: r.offset, service: r.service, taskId: r.task_id, projectId: r.project_id, eventId: r.event_id, eventType: r.event_type, code: r.code, reason: r.reason, source: r.source, failedAt: r.failed_at?.toISOString() ?? null }));
}

/**
 * The follower's supervision under names of its own: the monitor's main consumer already reports
 * consumer_running and consumer_crashes_total in this process, without a label to tell two apart.
 */
function followerMetrics(metrics: Metrics): ReturnType<typeof createConsumerMetrics> {
  const running = metrics.gauge('saga_monitor_dead_letter_follower_running', "1 while the follower of the services' dead-letter topics consumes, else 0");
  const crashes = metrics.counter('saga_monitor_dead_letter_follower_crashes_total', 'Crashes of the follower of the dead-letter topics, by who restarts it', ['restart']);
  // Both series from the start, as the main consumer's: one born at 1 hides its first crash from increase().
  for (const restart of ['kafkajs', 'loop']) crashes.inc({ restart }, 0);
  return {
    ...createConsumerMetrics(undefined),
    runningGauge: running,
    crashCount: crashes,
    restartCount: metrics.counter('saga_monitor_dead_letter_follower_restarts_total', 'Restarts of the follower the monitor made after kafkajs gave up'),
  };
}

/**
 * Follows the dead-letter topics of the four services and of the monitor itself with a group of its
 * own and keeps each dead letter for its task's timeline. At least once into an idempotent insert
 * (the coordinates are the key), so a restart that reads some again records and counts nothing twice.
 */
export async function startDeadLetterFollower(deps: { readonly config: SagaMonitorConfig; readonly pool: Pool; readonly logger: Logger; readonly metrics: Metrics; readonly lifecycle: Lifecycle }): Promise<void> {
  const { config, pool, lifecycle, metrics } = deps;
  const logger = deps.logger.child({ component: 'dead-letters' });
  const prefix = config.KAFKA_TOPIC_PREFIX;
  const kafka = createKafka({ brokers: config.KAFKA_BROKERS, clientId: 'saga-monitor-dead-letters', logger, ...kafkaSecurity(config) });
  // The monitor's own too: an event it could not record is missing from its timeline and would
  // leave a watch waiting (or none opened), and the page must say why.
  const topics = [...Object.values(TopicOwners), 'saga-monitor' as const].map((service) => deadLetterTopic(prefix, service));
  // Each service creates its own DLQ at start; the monitor may start first.
  await ensureTopics(kafka, topics, config.KAFKA_TOPIC_PARTITIONS, { replicationFactor: config.KAFKA_TOPIC_REPLICATION_FACTOR, configs: Object.fromEntries(topics.map((t) => [t, { 'retention.ms': String(config.DEDUP_INBOX_RETENTION_MS) }])) });
  const consumer = kafka.consumer({ groupId: `${prefix}.saga-monitor.dead-letters`, sessionTimeout: config.KAFKA_SESSION_TIMEOUT_MS });
  const runConfig: SupervisedRunConfig = {
    eachMessage: async ({ topic, partition, message }) => {
      const row = readDeadLetter(topic, partition, message, prefix);
      try {
        if (await recordDeadLetter(pool, row)) recorded.inc({ source_service: row.service });
      } catch (error) {
        // Waiting fixes an outage: kafkajs retries the message. Anything else would fail the same
        // way on every retry and hold up every later dead letter of the partition, so this one is
        // let go, loudly: it stays on its topic, readable with `npm run dlq`.
        if (isTransientDbError(error)) throw error;
        unrecorded.inc({ source_service: row.service });
        logger.error({ err: error, topic, partition, offset: message.offset, taskId: row.taskId, code: row.code }, 'dead letter not recorded: the database refused it; it stays on its topic');
        return;
      }
      logger.info({ topic, offset: message.offset, taskId: row.taskId, code: row.code }, 'dead letter recorded');
    },
  };
  // Restarted, with backoff, after a crash kafkajs gives up on (a refused join, a coordinator
  // error it does not retry): a dead follower would leave timelines without their dead letters.
  // Not `service`: every series of this process carries service="saga-monitor" already, and a
  // metric's own label of that name would replace it.
  const recorded = metrics.counter('saga_monitor_dead_letters_recorded_total', 'Dead letters read from the dead-letter topics and recorded for the timelines, by the service that dead-lettered them', ['source_service']);
  const unrecorded = metrics.counter('saga_monitor_dead_letters_unrecorded_total', 'Dead letters the database refused to record (they stay on their topics), by the service that dead-lettered them', ['source_service']);
  const supervision = superviseConsumer({ consumer, runConfig, policy: defaultRestart, metrics: followerMetrics(metrics), log: logger });
  lifecycle.onClose('dead-letter-follower', async () => {
    await supervision.close();
    await consumer.disconnect();
    supervision.enter('stopped');
  });
  supervision.enter('starting');
  await consumer.connect();
  await consumer.subscribe({ topics, fromBeginning: true });
  await consumer.run(runConfig);
}
