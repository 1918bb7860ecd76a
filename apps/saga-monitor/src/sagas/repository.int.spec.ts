import { randomUUID } from 'node:crypto';
import type pg from 'pg';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import type { DomainEvent } from '@labelflow/contracts';
import { createPool, migrate, withTransaction } from '@labelflow/service-kit';
import { freshDatabase, freshSnowflake, seqScansOf } from '@labelflow/testing';
import { migrations } from '../migrations';
import { observeEvent } from './record';
import { loadSagasForUpdate, saveSagasMany } from './repository';

const infra = inject('infra');
const deadlines = { qa_started: 60_000, billing: 60_000, completion: 60_000, rework: 60_000, failure: 60_000, refund: 60_000 };

describe('saga-monitor batch statements under generic plans', () => {
  let pool: pg.Pool;
  const projectId = randomUUID();
  const taskId = freshSnowflake();
  const event = (type: 'LabelSubmitted' | 'QaStarted', payload: Record<string, unknown>): DomainEvent =>
    ({ id: freshSnowflake(), type, version: 1, taskId, projectId, attempt: 1, occurredAt: new Date().toISOString(), producer: type === 'QaStarted' ? 'qa-svc' : 'label-svc', payload }) as DomainEvent;
  /** Loads, observes and saves one event as the monitor's consumer does, in `tx`. */
  const record = async (tx: pg.PoolClient, e: DomainEvent) => {
    const before = (await loadSagasForUpdate(tx, [e.taskId], [e])).get(e.taskId)!;
    const after = observeEvent(before, e, { deadlines, consumedAt: new Date().toISOString(), traceId: null });
    await saveSagasMany(tx, [{ before, after }]);
    return after;
  };

  // Thousands of sagas, each with an event and a watch, analyzed (by autovacuum, or by the service
  // when it is off), behind the service's pool: named prepared statements, whose generic plans it keeps.
  const db = freshDatabase(
    infra.pgUrl,
    'monitorplans',
    async (p) => {
      await migrate(p, migrations);
      await p.query(
        `INSERT INTO sagas (task_id, project_id, attempt, last_event_type, first_event_at, last_event_at, events)
         SELECT g::text, gen_random_uuid(), 1, 'LabelSubmitted', now(), now(), 1 FROM generate_series(1, 3000) g`,
      );
      await p.query(`INSERT INTO saga_watches (task_id, step, attempt, since, due_at) SELECT g::text, 'qa_started', 1, now(), now() + interval '1 hour' FROM generate_series(1, 3000) g`);
      await p.query(
        `INSERT INTO saga_events (event_id, task_id, project_id, type, version, attempt, producer, occurred_at, consumed_at, payload)
         SELECT 'e' || g, g::text, gen_random_uuid(), 'LabelSubmitted', 1, 1, 'label-svc', now(), now(), '{}' FROM generate_series(1, 3000) g`,
      );
      await p.query('ANALYZE sagas, saga_watches, saga_events');
      // The task under test waits for QaStarted.
      await withTransaction(p, (tx) => record(tx, event('LabelSubmitted', { annotatorId: 'ann-1', annotations: [{ label: 'cat', confidence: 0.9 }] })));
    },
    { pool: (url) => createPool(url, { max: 2, refuseNestedConnections: true }) },
  );
  beforeAll(async () => void (pool = await db.open()));
  afterAll(() => db.close());

  it("updates a saga's row and drops its watch through their keys, never scanning the tables", async () => {
    let after: Awaited<ReturnType<typeof record>> | undefined;
    const scans = await withTransaction(pool, (tx) =>
      seqScansOf(tx, ['sagas', 'saga_watches', 'saga_events'], async () => {
        after = await record(tx, event('QaStarted', { annotatorId: 'ann-1' }));
      }),
    );
    expect(scans).toEqual({ sagas: 0, saga_watches: 0, saga_events: 0 });
    expect(after?.row).toMatchObject({ lastEventType: 'QaStarted', events: 2 });
    const left = await pool.query(`SELECT step FROM saga_watches WHERE task_id = $1`, [taskId]);
    expect(left.rows).toEqual([]);
  });
});
