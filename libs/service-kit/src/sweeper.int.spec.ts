import type pg from 'pg';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { InMemorySpanExporter } from '@opentelemetry/sdk-trace-base';
import { createMetrics, currentTraceHeaders, installTracePropagation, startTracing } from '@labelflow/telemetry';
import { captureLogs, eventually, freshDatabase, metricValue } from '@labelflow/testing';
import { createPool } from './db';
import { startSweeper, sweepOnce, type Sweeper } from './sweeper';
import { Lifecycle } from './lifecycle';

const infra = inject('infra');

describe('a deadline sweep', () => {
  let pool: pg.Pool;
  const db = freshDatabase(infra.pgUrl, 'sweeper', (p) => p.query('CREATE TABLE deadlines (key text PRIMARY KEY, due_at timestamptz NOT NULL, fired boolean NOT NULL DEFAULT false)'), {
    pool: (url) => createPool(url, { max: 2 }),
  });
  beforeAll(async () => void (pool = await db.open()));
  afterAll(() => db.close());

  /** Fires a deadline by marking its row; the key named `poison` throws after writing, every time. */
  const sweeper: Sweeper = {
    name: 'test',
    async claimDue(tx, limit, now) {
      const { rows } = await tx.query<{ key: string }>('SELECT key FROM deadlines WHERE NOT fired AND due_at <= $1 ORDER BY due_at LIMIT $2 FOR UPDATE SKIP LOCKED', [now, limit]);
      return rows.map((r) => r.key);
    },
    async fire(tx, key) {
      await tx.query('UPDATE deadlines SET fired = true WHERE key = $1', [key]);
      if (key === 'poison') throw new Error('this deadline cannot fire');
      if (key === 'busy') throw Object.assign(new Error('lost a race'), { retriable: true });
      return [];
    },
  };

  it('fires every due deadline behind one that always throws, rolls that one back alone, and counts it', async () => {
    // The poison is the oldest: every claim takes it first.
    await pool.query(`INSERT INTO deadlines (key, due_at) VALUES ('poison', now() - interval '1 hour')`);
    await pool.query(`INSERT INTO deadlines (key, due_at) SELECT 'k' || g, now() - interval '1 minute' FROM generate_series(1, 5) g`);
    const logs = captureLogs({ service: 'sweeper-test' });
    const metrics = createMetrics({ service: 'sweeper-test', defaults: false });
    const deps = { pool, emit: async () => [], logger: logs.logger, metrics, now: () => new Date(), everyMs: 1_000, batchSize: 2 };

    expect(await sweepOnce(sweeper, deps)).toBe(5);

    const { rows } = await pool.query<{ key: string; fired: boolean }>('SELECT key, fired FROM deadlines ORDER BY key');
    expect(rows).toEqual([{ key: 'k1', fired: true }, { key: 'k2', fired: true }, { key: 'k3', fired: true }, { key: 'k4', fired: true }, { key: 'k5', fired: true }, { key: 'poison', fired: false }]);
    // Claimed first in each of the six batches (five with one good key behind it, and the last alone).
    const failures = logs.lines.filter((l) => String(l.msg).startsWith('deadline failed to fire'));
    expect(failures).toHaveLength(6);
    expect(new Set(failures.map((l) => l.key))).toEqual(new Set(['poison']));
    expect(metricValue(await metrics.render(), 'deadlines_failed_total', { sweeper: 'test' })).toBe(6);
    // Only the poison is left: the next sweep fires nothing, and ends rather than claiming it forever.
    expect(await sweepOnce(sweeper, deps)).toBe(0);
  });

  it('counts a sweep that fails as a whole, which fires nothing and refuses no single key', async () => {
    const logs = captureLogs({ service: 'sweeper-test' });
    const metrics = createMetrics({ service: 'sweeper-test', defaults: false });
    const lifecycle = new Lifecycle(logs.logger);
    // The claim itself fails, as after a migration that broke its query: no key is ever tried.
    const broken: Sweeper = { ...sweeper, name: 'broken', claimDue: (tx) => tx.query('SELECT due_at FROM no_such_table').then(() => []) };
    startSweeper(broken, { pool, emit: async () => [], logger: logs.logger, metrics, now: () => new Date(), everyMs: 10 }, lifecycle);
    await eventually(async () => expect(metricValue(await metrics.render(), 'deadline_sweeps_failed_total', { sweeper: 'broken', transient: 'false' })).toBeGreaterThanOrEqual(2));
    await lifecycle.close();
    expect(await metrics.render()).not.toMatch(/deadlines_failed_total\{/);
  });

  it('leaves a deadline that failed transiently to the next sweep without counting or warning, and fires the others', async () => {
    await pool.query('TRUNCATE deadlines');
    await pool.query(`INSERT INTO deadlines (key, due_at) VALUES ('busy', now() - interval '1 hour'), ('k9', now() - interval '1 minute')`);
    const logs = captureLogs({ service: 'sweeper-test' });
    const metrics = createMetrics({ service: 'sweeper-test', defaults: false });

    expect(await sweepOnce(sweeper, { pool, emit: async () => [], logger: logs.logger, metrics, now: () => new Date(), everyMs: 1_000 })).toBe(1);

    const { rows } = await pool.query<{ key: string; fired: boolean }>('SELECT key, fired FROM deadlines ORDER BY key');
    expect(rows).toEqual([{ key: 'busy', fired: false }, { key: 'k9', fired: true }]);
    expect(logs.lines.filter((l) => l.level >= 40)).toEqual([]);
    expect(await metrics.render()).not.toMatch(/deadlines_failed_total\{/);
  });

  it('roots a trace per fired deadline while a tracer records, tagged with its task, and the events it emits continue it', async () => {
    await pool.query('TRUNCATE deadlines');
    await pool.query(`INSERT INTO deadlines (key, due_at) VALUES ('7001', now() - interval '1 minute'), ('7002', now() - interval '1 minute')`);
    installTracePropagation();
    const exporter = new InMemorySpanExporter();
    const logs = captureLogs({ service: 'sweeper-test' });
    const tracing = startTracing({ service: 'qa-svc', logger: logs.logger, env: { OTEL_EXPORTER_OTLP_ENDPOINT: 'http://127.0.0.1:4318' }, exporter });
    try {
      const emitted = new Map<string, Record<string, string>>();
      const emit = async (_tx: unknown, _drafts: unknown, causationId?: string) => (emitted.set(String(causationId), currentTraceHeaders()), []);
      expect(await sweepOnce({ ...sweeper, factsOf: (taskId) => ({ taskId }) }, { pool, emit, logger: logs.logger, now: () => new Date(), everyMs: 1_000 })).toBe(2);
      await tracing.flush();

      const spans = exporter.getFinishedSpans().filter((s) => s.name === 'deadline test');
      expect(spans.map((s) => s.attributes['labelflow.task_id']).sort()).toEqual(['7001', '7002']);
      for (const span of spans) {
        expect(span.parentSpanContext).toBeUndefined();
        expect(span.attributes['labelflow.deadline.sweeper']).toBe('test');
        const headers = emitted.get(`deadline:test:${String(span.attributes['labelflow.task_id'])}`);
        expect(headers?.traceparent).toBe(`00-${span.spanContext().traceId}-${span.spanContext().spanId}-01`);
        expect(decodeURIComponent(headers?.baggage ?? '')).toBe(`labelflow.task_id=${String(span.attributes['labelflow.task_id'])}`);
      }
      expect(new Set(spans.map((s) => s.spanContext().traceId)).size).toBe(2);
    } finally {
      await tracing.shutdown();
    }
  });
});
