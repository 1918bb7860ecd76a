import { Kafka, logLevel } from 'kafkajs';
import pg from 'pg';
import { deadLetterTopicsOf, guardedPool, runAudit, type AuditReport, type Sources } from '@labelflow/auditor';
import { topicName, topicOf, type EventType, type ServiceName, type TopicKey } from '@labelflow/contracts';
import { serviceOrder } from './schedule';

/**
 * The event types each service's consumer applies (and records in its inbox), from the
 * "Subscribes to / Reacts to" table of docs/architecture.md. A type a service's inbox holds that is
 * missing here is reported, so the table cannot silently drift.
 */
export const CONSUMES: Readonly<Record<ServiceName, readonly EventType[]>> = {
  'task-svc': ['LabelSubmitted', 'QaStarted', 'QaPassed', 'QaRejected', 'QaTimedOut', 'BillingCompleted', 'BillingFailed'],
  'label-svc': ['TaskAssigned', 'TaskReopened', 'TaskCancelled', 'QaPassed', 'QaRejected', 'QaTimedOut', 'BillingFailed', 'BillingCompleted', 'BillingRefunded'],
  'qa-svc': ['LabelSubmitted', 'TaskReopened', 'TaskCancelled', 'BillingFailed', 'BillingCompleted', 'BillingRefunded'],
  'billing-svc': ['QaPassed', 'TaskCancelled', 'TaskReopened'],
};

const ownTopic: Readonly<Record<ServiceName, TopicKey>> = { 'task-svc': 'task', 'label-svc': 'label', 'qa-svc': 'qa', 'billing-svc': 'billing' };

/** Runs `work` with one client per database, each in its own REPEATABLE READ, READ ONLY transaction. */
async function inSnapshots<T>(databases: Readonly<Record<ServiceName, string>>, work: (clients: Readonly<Record<ServiceName, pg.Client>>) => Promise<T>): Promise<T> {
  const clients = {} as Record<ServiceName, pg.Client>;
  try {
    for (const name of serviceOrder) {
      const client = new pg.Client({ connectionString: databases[name], connectionTimeoutMillis: 10_000, statement_timeout: 120_000 });
      client.on('error', () => undefined);
      await client.connect();
      clients[name] = client;
    }
    // Each database is read at one instant of its own; there is no instant common to four servers' worth of databases.
    await Promise.all(serviceOrder.map((n) => clients[n].query('BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY')));
    const result = await work(clients);
    await Promise.all(serviceOrder.map((n) => clients[n].query('COMMIT')));
    return result;
  } finally {
    await Promise.all(Object.values(clients).map((c) => c.end().catch(() => undefined)));
  }
}

/**
 * The auditor (tools/auditor) as e2e/audit.ts's `auditStack` runs it (settle 0, stuck and outbox
 * bounds 60 s, the four DLQs), which a tool cannot import. The auditor reads each database in one
 * REPEATABLE READ READ ONLY transaction of its own (`takeSnapshot`), borrowing a connection per pool.
 */
export async function auditSnapshot(databases: Readonly<Record<ServiceName, string>>, kafkaBrokers: string, prefix: string): Promise<AuditReport> {
  const pools = {} as Record<ServiceName, pg.Pool>;
  for (const name of serviceOrder) {
    pools[name] = guardedPool({ connectionString: databases[name], max: 2, connectionTimeoutMillis: 10_000 }, () => undefined);
  }
  try {
    const sources: Sources = { task: pools['task-svc'], label: pools['label-svc'], qa: pools['qa-svc'], billing: pools['billing-svc'] };
    return await runAudit({
      sources,
      settleMs: 0,
      stuckMs: 60_000,
      outboxMs: 60_000,
      kafkaBrokers: kafkaBrokers.split(','),
      deadLetterTopics: deadLetterTopicsOf(prefix),
    });
  } finally {
    await Promise.all(Object.values(pools).map((p) => p.end().catch(() => undefined)));
  }
}

export interface LostEvent {
  readonly where: 'kafka' | 'inbox';
  /** The service whose outbox holds it ('kafka'), or the consumer whose inbox lacks it ('inbox'). */
  readonly service: ServiceName;
  readonly type: string;
  readonly taskId: string;
  readonly attempt: number;
  readonly eventId?: string;
  readonly detail?: string;
}

export interface LostReport {
  readonly outboxRows: number;
  readonly unpublishedRows: number;
  readonly topicMessages: number;
  readonly distinctEventIds: number;
  /** Outbox rows whose event id is not on their topic. */
  readonly notOnKafka: number;
  /** (task, type, attempt) emitted of a type a consumer reads, without a row in that consumer's inbox. */
  readonly missingInboxRows: number;
  readonly lost: number;
  /** The first lost events, for the report. */
  readonly sample: readonly LostEvent[];
  /** Inbox rows with no emitted event behind them, and inbox types missing from CONSUMES: informational. */
  readonly notes: readonly string[];
}

interface OutboxRow {
  readonly event_id: string;
  readonly event_type: string;
  readonly task_id: string;
  readonly attempt: number;
  readonly published: boolean;
}

/** Every event id on a topic, read from the beginning up to the high watermarks taken first. */
async function eventIdsOn(brokers: string, topic: string, timeoutMs: number): Promise<{ ids: Set<string>; messages: number; unreadable: number }> {
  const kafka = new Kafka({ clientId: 'labelflow-chaos-reader', brokers: brokers.split(','), logLevel: logLevel.NOTHING });
  const admin = kafka.admin();
  await admin.connect();
  const ends = await admin.fetchTopicOffsets(topic).finally(() => admin.disconnect());
  const pending = new Map(ends.filter((p) => Number(p.high) > Number(p.low)).map((p) => [p.partition, Number(p.high) - 1]));
  const ids = new Set<string>();
  let messages = 0;
  let unreadable = 0;
  if (pending.size === 0) return { ids, messages, unreadable };
  const consumer = kafka.consumer({ groupId: `labelflow-chaos-reader-${Date.now()}-${Math.random().toString(36).slice(2)}`, maxBytesPerPartition: 4 * 1024 * 1024 });
  await consumer.connect();
  try {
    await consumer.subscribe({ topic, fromBeginning: true });
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`read ${messages} messages of ${topic} in ${timeoutMs / 1000} s; partitions not read to the end: ${[...pending.keys()].join(', ')}`)), timeoutMs);
      void consumer.run({
        autoCommit: false,
        eachBatch: async ({ batch }) => {
          for (const m of batch.messages) {
            messages++;
            try {
              const id = (JSON.parse(m.value?.toString() ?? '') as { id?: unknown }).id;
              if (typeof id === 'string') ids.add(id);
              else unreadable++;
            } catch {
              unreadable++;
            }
            const last = pending.get(batch.partition);
            if (last !== undefined && Number(m.offset) >= last) pending.delete(batch.partition);
          }
          if (pending.size === 0) {
            clearTimeout(timer);
            resolve();
          }
        },
      });
    });
  } finally {
    await consumer.disconnect();
  }
  return { ids, messages, unreadable };
}

/**
 * Lost events, counted two ways, after the stack came to rest:
 * 1. every outbox message of every service (published or not; a bundle's one by one, from the
 *    outbox_messages view) must be on its topic: its event id among the topic's messages;
 * 2. every (task, type, attempt) emitted of a type a service consumes must have one row in that
 *    service's inbox (the inbox key is that triple: duplicates and re-emissions collapse into it).
 * The databases are read first (REPEATABLE READ each), then the topics up to their current end, so
 * an event committed after the snapshot is never counted as lost.
 */
export async function findLostEvents(databases: Readonly<Record<ServiceName, string>>, brokers: string, prefix: string, timeoutMs = 180_000): Promise<LostReport> {
  const { outbox, inbox } = await inSnapshots(databases, async (c) => {
    const outbox = {} as Record<ServiceName, OutboxRow[]>;
    const inbox = {} as Record<ServiceName, { task_id: string; event_type: string; attempt: number }[]>;
    for (const name of serviceOrder) {
      outbox[name] = (
        await c[name].query<OutboxRow>(`SELECT event_id, event_type, message_key AS task_id, (payload->>'attempt')::int AS attempt, failed_at IS NULL AND NOT EXISTS (SELECT 1 FROM outbox_pending p WHERE p.id = o.id) AS published
           FROM outbox_messages o`)
      ).rows;
      inbox[name] = (await c[name].query<{ task_id: string; event_type: string; attempt: number }>('SELECT task_id, event_type, attempt FROM inbox')).rows;
    }
    return { outbox, inbox };
  });

  const sample: LostEvent[] = [];
  const notes: string[] = [];
  const keep = (e: LostEvent) => void (sample.length < 50 && sample.push(e));
  let notOnKafka = 0;
  let topicMessages = 0;
  let distinct = 0;
  for (const name of serviceOrder) {
    const topic = topicName(prefix, ownTopic[name]);
    const read = await eventIdsOn(brokers, topic, timeoutMs);
    topicMessages += read.messages;
    distinct += read.ids.size;
    if (read.unreadable > 0) notes.push(`${topic}: ${read.unreadable} messages without a readable event id`);
    const own = new Set(outbox[name].map((r) => r.event_id));
    const foreign = [...read.ids].filter((id) => !own.has(id)).length;
    if (foreign > 0) notes.push(`${topic}: ${foreign} event ids with no row in ${name}'s outbox`);
    for (const r of outbox[name]) {
      if (read.ids.has(r.event_id)) continue;
      notOnKafka++;
      keep({ where: 'kafka', service: name, type: r.event_type, taskId: r.task_id, attempt: r.attempt, eventId: r.event_id, detail: r.published ? 'marked published, yet not on the topic' : 'never published' });
    }
  }

  // Every (task, type, attempt) emitted, by type.
  const emitted = new Map<string, Set<string>>();
  for (const name of serviceOrder) {
    for (const r of outbox[name]) {
      if (topicOf(r.event_type as EventType) !== ownTopic[name]) notes.push(`${name} emitted ${r.event_type}, which belongs to another topic`);
      const keys = emitted.get(r.event_type) ?? new Set<string>();
      keys.add(`${r.task_id}|${r.attempt}`);
      emitted.set(r.event_type, keys);
    }
  }
  let missingInboxRows = 0;
  for (const consumer of serviceOrder) {
    const held = new Map<string, Set<string>>();
    for (const r of inbox[consumer]) {
      const keys = held.get(r.event_type) ?? new Set<string>();
      keys.add(`${r.task_id}|${r.attempt}`);
      held.set(r.event_type, keys);
    }
    for (const type of held.keys()) if (!(CONSUMES[consumer] as readonly string[]).includes(type)) notes.push(`${consumer}'s inbox holds ${type}, which CONSUMES does not list for it`);
    for (const type of CONSUMES[consumer]) {
      const got = held.get(type) ?? new Set<string>();
      const want = emitted.get(type) ?? new Set<string>();
      for (const key of want) {
        if (got.has(key)) continue;
        missingInboxRows++;
        const [taskId = '', attempt = '0'] = key.split('|');
        keep({ where: 'inbox', service: consumer, type, taskId, attempt: Number(attempt) });
      }
      const extra = [...got].filter((k) => !want.has(k)).length;
      if (extra > 0) notes.push(`${consumer}'s inbox holds ${extra} ${type} keys no service emitted`);
    }
  }
  const outboxRows = serviceOrder.reduce((n, s) => n + outbox[s].length, 0);
  const unpublishedRows = serviceOrder.reduce((n, s) => n + outbox[s].filter((r) => !r.published).length, 0);
  return { outboxRows, unpublishedRows, topicMessages, distinctEventIds: distinct, notOnKafka, missingInboxRows, lost: notOnKafka + missingInboxRows, sample, notes: [...new Set(notes)] };
}
