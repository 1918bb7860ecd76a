import { afterAll, afterEach, beforeAll, describe, expect, inject, it } from 'vitest';
import { Redis } from 'ioredis';
import { TopicSchemas, type AnnotatorId, type DomainEvent, type TaskReopened } from '@labelflow/contracts';
import { createDedupGate, inboxReader, type DedupGate } from '@labelflow/dedup';
import { createConsumerLoop, createKafka, ensureTopics, type ConsumerLoop } from '@labelflow/messaging';
import { createMetrics, installTracePropagation, type Metrics } from '@labelflow/telemetry';
import { captureLogs, createTestDatabase, eventually, metricValue, produceRaw, readTopic, uniqueName } from '@labelflow/testing';
import { createExactlyOnce, eventConsumer, preloadedStore } from './consume';
import { createPool, isTransientDbError, type Pool } from './db';
import { createEmitter } from './events';
import { coreMigrations, migrate } from './migrations';

const infra = inject('infra');

/** A toy capability: counts each task's reopens, refusing any that does not move the attempt forward. */
interface Counter {
  readonly taskId: string;
  readonly reopens: number;
  readonly attempt: number;
}

describe('the exactly-once shell on real Kafka, PostgreSQL and Redis', () => {
  const { logger } = captureLogs({ service: 'shell-test', level: 'info' });
  const kafka = createKafka({ brokers: infra.kafkaBrokers.split(','), clientId: 'shell-test', logger });
  let pool: Pool;
  let drop: () => Promise<void>;
  let redis: Redis;
  const loops: ConsumerLoop[] = [];
  const gates: DedupGate[] = [];

  beforeAll(async () => {
    // As every service does at start: trace headers travel on from what is consumed.
    installTracePropagation();
    const db = await createTestDatabase(infra.pgUrl, uniqueName('shell'));
    drop = db.drop;
    pool = createPool(db.url, { refuseNestedConnections: true });
    await migrate(pool, coreMigrations);
    await pool.query('CREATE TABLE counters (task_id text PRIMARY KEY, reopens int NOT NULL, attempt int NOT NULL)');
    redis = new Redis(infra.redisUrl, { lazyConnect: true, maxRetriesPerRequest: 0 });
    await redis.connect();
  });
  afterEach(async () => {
    await Promise.all(loops.splice(0).map((l) => l.close()));
    gates.splice(0).forEach((g) => g.close());
  });
  afterAll(async () => {
    redis.disconnect();
    await pool.end();
    await drop();
  });

  const store = preloadedStore<Counter>({
    async loadMany(tx, taskIds) {
      await tx.query('INSERT INTO counters SELECT unnest($1::text[]), 0, 0 ORDER BY 1 ON CONFLICT DO NOTHING', [taskIds]);
      const { rows } = await tx.query<{ task_id: string; reopens: number; attempt: number }>('SELECT * FROM counters WHERE task_id = ANY($1) ORDER BY task_id FOR UPDATE', [taskIds]);
      return new Map(rows.map((r) => [r.task_id, { taskId: r.task_id, reopens: r.reopens, attempt: r.attempt }]));
    },
    async saveMany(tx, changes) {
      await tx.query('UPDATE counters c SET reopens = u.reopens, attempt = u.attempt FROM unnest($1::text[], $2::int[], $3::int[]) AS u(task_id, reopens, attempt) WHERE c.task_id = u.task_id', [
        changes.map((c) => c.after.taskId),
        changes.map((c) => c.after.reopens),
        changes.map((c) => c.after.attempt),
      ]);
    },
  });
  const counting = eventConsumer<Counter, unknown>(store, {
    TaskReopened: (event, state) => {
      if (event.payload.reason === 'LEASE_EXPIRED' && event.payload.previousAnnotatorId === 'poison') throw Object.assign(new Error('handler bug'), { code: 'BUG' });
      if (event.attempt <= state.attempt) return { ok: false, reason: { code: 'STALE_ATTEMPT', message: `attempt ${event.attempt} after ${state.attempt}` } };
      const next = { ...state, reopens: state.reopens + 1, attempt: event.attempt };
      // One reopen in these tests reacts with an event, to show what its outbox row carries on.
      if (event.payload.previousAnnotatorId === 'reacts') {
        return { ok: true, state: next, events: [{ type: 'TaskCompleted', version: 1, taskId: event.taskId, projectId: event.projectId, attempt: event.attempt, payload: { annotatorId: 'ann-1' as AnnotatorId } }] };
      }
      return { ok: true, state: next, events: [] };
    },
  });

  const start = async (opts: { topic: string; groupId: string; namespace: string; metrics: Metrics; crashAfterFirstCommit?: boolean; lockTimeoutMs?: number }) => {
    const gate = createDedupGate({
      redis, inbox: inboxReader(pool), namespace: opts.namespace, doneTtlMs: 60_000, redisTimeoutMs: 5_000,
      breaker: { failureThreshold: 3, openMs: 1_000 }, bloom: { capacity: 10_000, errorRate: 0.01 }, warmWindowMs: 0, logger,
    });
    gates.push(gate);
    const emitter = createEmitter({ producer: 'task-svc', topicPrefix: 'shell', channel: 'outbox_shell', now: () => new Date(), newId: () => String(8_000_000_000_000_000_000n + nextId++) });
    const shell = createExactlyOnce({ pool, gate, consumers: [counting], ctx: {}, emitMany: emitter.emitMany, ...(opts.lockTimeoutMs ? { lockTimeoutMs: opts.lockTimeoutMs } : {}) });
    let crashed = !opts.crashAfterFirstCommit;
    const loop = createConsumerLoop<DomainEvent>({
      kafka,
      groupId: opts.groupId,
      bindings: [{ topic: opts.topic, schema: TopicSchemas.task }],
      deadLetterTopic: `${opts.topic}.dlq`,
      logger,
      metrics: opts.metrics,
      isRetriable: (error) => (error as { retriable?: boolean }).retriable === true || isTransientDbError(error),
      retry: { initialMs: 20, maxMs: 100, maxAttempts: 2 },
      sessionTimeoutMs: 6_000,
      processor: {
        handles: shell.handles,
        async process(run) {
          const outcomes = await shell.process(run);
          // Committed, and then the process "dies" before the loop could resolve one offset.
          if (!crashed) {
            crashed = true;
            throw Object.assign(new Error('crash between commit and offset commit'), { retriable: true });
          }
          return outcomes;
        },
      },
    });
    loops.push(loop);
    await loop.start();
    return loop;
  };

  const setup = async () => {
    const topic = uniqueName('shell-topic');
    await ensureTopics(kafka, [topic, `${topic}.dlq`], 1);
    return { topic, groupId: uniqueName('group'), namespace: uniqueName('ns'), metrics: createMetrics({ service: 'shell-test', defaults: false }) };
  };
  const projectId = crypto.randomUUID();
  let nextId = 1n;
  const reopened = (taskId: string, attempt: number, previousAnnotatorId = 'ann-1'): TaskReopened => ({
    id: String(7_000_000_000_000_000_000n + nextId++) as TaskReopened['id'],
    type: 'TaskReopened',
    version: 1,
    taskId: taskId as TaskReopened['taskId'],
    projectId: projectId as TaskReopened['projectId'],
    attempt,
    occurredAt: new Date().toISOString(),
    producer: 'task-svc',
    payload: { reason: previousAnnotatorId === 'poison' ? 'LEASE_EXPIRED' : 'QA_REJECTED', previousAttempt: attempt - 1, previousAnnotatorId: previousAnnotatorId as TaskReopened['payload']['previousAnnotatorId'] },
  });
  const taskId = () => String(BigInt(Date.now()) * 4096n + nextId++);
  const send = (topic: string, events: readonly TaskReopened[]) =>
    produceRaw(infra.kafkaBrokers, topic, events.map((e) => ({ key: e.taskId, value: JSON.stringify(e), headers: { 'event-type': e.type } })));
  const counters = async (ids: readonly string[]) =>
    Object.fromEntries((await pool.query<{ task_id: string; reopens: number; attempt: number }>('SELECT * FROM counters WHERE task_id = ANY($1)', [ids])).rows.map((r) => [r.task_id, [r.reopens, r.attempt]]));

  it('applies a batch full of duplicates once per key: repeats inside the batch, keys Redis knows and keys only the inbox knows', async () => {
    const t = await setup();
    const ids = Array.from({ length: 40 }, taskId);
    const events = ids.map((id) => reopened(id, 2));
    // Half the keys are applied and committed first, so a later delivery is known to Redis.
    const earlier = events.slice(0, 20);
    await send(t.topic, earlier);
    await start(t);
    const redisKeys = earlier.map((e) => `${t.namespace}:${e.taskId}:TaskReopened:2`);
    await eventually(async () => expect(Object.keys(await counters(ids))).toHaveLength(20));
    // Redis hears "done" after the commit: forgetting a key before that would be undone by it.
    await eventually(async () => expect(await redis.exists(...redisKeys)).toBe(20));
    // Redis forgets ten of them: only the inbox can tell those apart now.
    await redis.del(...redisKeys.slice(0, 10));
    await send(t.topic, [...events, ...events.slice(30), ...earlier]);
    await eventually(async () => expect(metricValue(await t.metrics.render(), 'consumer_messages_total', { type: 'TaskReopened' })).toBe(20 + 40 + 10 + 20));

    expect(Object.values(await counters(ids))).toEqual(ids.map(() => [1, 2]));
    const rendered = await t.metrics.render();
    expect(metricValue(rendered, 'consumer_messages_total', { outcome: 'applied' })).toBe(40);
    expect(metricValue(rendered, 'dedup_duplicates_total', { tier: 'redis' })).toBeGreaterThan(0);
    expect(metricValue(rendered, 'dedup_duplicates_total', { tier: 'postgres' })).toBeGreaterThan(0);
    expect(metricValue(rendered, 'dedup_duplicates_total', {})).toBe(50);
    const [batches] = rendered.match(/consumer_batch_size_count\{[^}]*\} (\d+)/)?.slice(1) ?? [];
    expect(Number(batches)).toBeLessThan(20);
  });

  it('carries the trace of a consumed message on into what it causes, but none of the baggage its producer added', async () => {
    const t = await setup();
    const id = taskId();
    const traceparent = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01';
    const event = reopened(id, 2, 'reacts');
    await produceRaw(infra.kafkaBrokers, t.topic, [{ key: id, value: JSON.stringify(event), headers: { 'event-type': event.type, traceparent, tracestate: 'vendor=1', baggage: 'tenant=acme,labelflow.project_id=forged' } }]);
    await start(t);
    await eventually(async () => expect(await counters([id])).toEqual({ [id]: [1, 2] }));
    const { rows } = await pool.query<{ headers: Record<string, string> }>("SELECT headers FROM outbox WHERE event_type = 'TaskCompleted' AND message_key = $1", [id]);
    expect(rows).toHaveLength(1);
    expect(rows[0]!.headers).toMatchObject({ traceparent, tracestate: 'vendor=1' });
    expect(rows[0]!.headers).not.toHaveProperty('baggage');
  });

  it('applies two events of one task in one batch in order, the second seeing the state the first left', async () => {
    const t = await setup();
    const [a, b] = [taskId(), taskId()];
    // a: 2 then 3, both apply; b: 3 then 2, the second is stale against the first within the batch.
    await send(t.topic, [reopened(a, 2), reopened(b, 3), reopened(a, 3), reopened(b, 2)]);
    await start(t);
    await eventually(async () => expect(metricValue(await t.metrics.render(), 'consumer_messages_total', {})).toBe(4));
    expect(await counters([a, b])).toEqual({ [a]: [2, 3], [b]: [1, 3] });
    const rendered = await t.metrics.render();
    expect(metricValue(rendered, 'consumer_messages_total', { outcome: 'applied' })).toBe(3);
    expect(metricValue(rendered, 'consumer_messages_total', { outcome: 'ignored' })).toBe(1);
  });

  it('dead-letters a poison message in the middle of a batch alone, and applies its neighbours once', async () => {
    const t = await setup();
    const ids = Array.from({ length: 9 }, taskId);
    const events = ids.map((id, i) => reopened(id, 2, i === 4 ? 'poison' : 'ann-1'));
    await send(t.topic, events);
    await start(t);
    const [dead] = await readTopic(infra.kafkaBrokers, `${t.topic}.dlq`, (m) => m.length >= 1);
    expect(dead!.headers?.['dlq-error-code']?.toString()).toBe('BUG');
    expect(dead!.headers?.['dlq-source-offset']?.toString()).toBe('4');
    await eventually(async () => expect(Object.keys(await counters(ids))).toHaveLength(8));
    const applied = await counters(ids);
    expect(ids.filter((_, i) => i !== 4).map((id) => applied[id])).toEqual(ids.slice(1).map(() => [1, 2]));
    expect(applied[ids[4]!]).toBeUndefined();
  });

  it('gives up waiting on a row lock another session holds after the lock timeout, retries with heartbeats between, and applies the event once the lock is let go', async () => {
    const t = await setup();
    const id = taskId();
    await pool.query('INSERT INTO counters VALUES ($1, 0, 1)', [id]);
    // A frozen peer: another instance's transaction that holds the task's row and does not end.
    const peer = await pool.connect();
    try {
      await peer.query('BEGIN');
      await peer.query('SELECT * FROM counters WHERE task_id = $1 FOR UPDATE', [id]);
      await send(t.topic, [reopened(id, 2)]);
      await start({ ...t, lockTimeoutMs: 200 });
      // Without a lock timeout the run would wait inside one transaction, sending kafkajs no heartbeat.
      await eventually(async () => expect(metricValue(await t.metrics.render(), 'consumer_retries_total', { kind: 'transient' })).toBeGreaterThanOrEqual(2));
      expect(await counters([id])).toEqual({ [id]: [0, 1] });
    } finally {
      await peer.query('ROLLBACK');
      peer.release();
    }
    await eventually(async () => expect(await counters([id])).toEqual({ [id]: [1, 2] }));
    expect(metricValue(await t.metrics.render(), 'consumer_messages_total', { outcome: 'applied' })).toBe(1);
  });

  it('applies nothing twice when it dies between committing a batch and committing its offsets, by Redis or by the inbox', async () => {
    const t = await setup();
    const ids = Array.from({ length: 10 }, taskId);
    await send(t.topic, ids.map((id) => reopened(id, 2)));
    await start({ ...t, crashAfterFirstCommit: true });
    await eventually(async () => expect(metricValue(await t.metrics.render(), 'consumer_messages_total', {})).toBe(10));
    expect(Object.values(await counters(ids))).toEqual(ids.map(() => [1, 2]));
    const first = await t.metrics.render();
    // The redelivery after the crash was caught before any transaction: Redis knew the keys.
    expect(metricValue(first, 'consumer_retries_total', { kind: 'transient' })).toBeGreaterThan(0);
    expect(metricValue(first, 'dedup_duplicates_total', { tier: 'redis' })).toBe(10);

    // A replay of the whole topic after Redis lost its memory: the inbox alone holds the line.
    await Promise.all(loops.splice(0).map((l) => l.close()));
    await redis.del(...ids.map((id) => `${t.namespace}:${id}:TaskReopened:2`));
    const replay = { ...t, groupId: uniqueName('replay'), metrics: createMetrics({ service: 'shell-test', defaults: false }) };
    await start(replay);
    await eventually(async () => expect(metricValue(await replay.metrics.render(), 'dedup_duplicates_total', { tier: 'postgres' })).toBe(10));
    expect(Object.values(await counters(ids))).toEqual(ids.map(() => [1, 2]));
  });
});
