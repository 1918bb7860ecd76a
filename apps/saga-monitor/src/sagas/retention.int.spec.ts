import type pg from 'pg';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { createPool, migrate } from '@labelflow/service-kit';
import { freshDatabase } from '@labelflow/testing';
import { migrations } from '../migrations';
import { pruneOnce } from './retention';

const infra = inject('infra');
const cutoff = new Date('2026-06-01T00:00:00Z');
const before = '2026-05-01T00:00:00Z';
const after = '2026-07-01T00:00:00Z';

describe('saga monitor retention', () => {
  let pool: pg.Pool;
  const db = freshDatabase(infra.pgUrl, 'monitorretention', (p) => migrate(p, migrations), { pool: (url) => createPool(url, { max: 2 }) });
  beforeAll(async () => void (pool = await db.open()));
  afterAll(() => db.close());

  /** One saga with two events and one watch. */
  /** A saga with its events; one still running (or ended but waiting on a step) has an open watch. */
  const saga = async (taskId: string, outcome: string | null, lastEventAt: string, watching = outcome === null) => {
    await pool.query(
      `INSERT INTO sagas (task_id, project_id, attempt, last_event_type, outcome, first_event_at, last_event_at) VALUES ($1, gen_random_uuid(), 1, 'TaskCompleted', $2, $3, $3)`,
      [taskId, outcome, lastEventAt],
    );
    await pool.query(
      `INSERT INTO saga_events (event_id, task_id, project_id, type, version, attempt, producer, occurred_at, consumed_at, payload)
       SELECT $1 || '-' || g, $1, gen_random_uuid(), 'TaskCreated', 1, 1, 'task-svc', $2, $2, '{}' FROM generate_series(1, 2) g`,
      [taskId, lastEventAt],
    );
    if (watching) await pool.query(`INSERT INTO saga_watches (task_id, step, attempt, since, due_at, alerted_at) VALUES ($1, $3, 1, $2, $2, $2)`, [taskId, lastEventAt, outcome === null ? 'billing' : 'refund']);
  };
  const letter = (offset: number, recordedAt: string) =>
    pool.query(`INSERT INTO dead_letters (topic, partition, "offset", service, code, reason, recorded_at) VALUES ('t.qa-svc.dlq', 0, $1, 'qa-svc', 'DECODE_FAILED', 'not json', $2)`, [offset, recordedAt]);
  const left = async (table: string) => (await pool.query<{ task_id: string }>(`SELECT DISTINCT task_id FROM ${table} ORDER BY task_id`)).rows.map((r) => r.task_id);

  it('forgets sagas that ended before the cutoff with their events, chunk after chunk, and keeps running, recent and still-watched ones', async () => {
    for (const id of ['1', '2', '3', '4', '5']) await saga(id, 'completed', before);
    await saga('6', 'cancelled', before);
    await saga('7', null, before);
    await saga('8', 'completed', after);
    // Cancelled long ago and its refund still alerting: the alert must stay until it resolves.
    await saga('77', 'cancelled', before, true);
    await letter(1, before);
    await letter(2, before);
    await letter(3, after);

    const pruned = await pruneOnce(pool, cutoff, 2);

    expect(pruned).toEqual({ sagas: 6, deadLetters: 2 });
    expect(await left('sagas')).toEqual(['7', '77', '8']);
    expect(await left('saga_events')).toEqual(['7', '77', '8']);
    expect(await left('saga_watches')).toEqual(['7', '77']);
    const letters = await pool.query<{ offset: string }>('SELECT "offset" FROM dead_letters');
    expect(letters.rows.map((r) => r.offset)).toEqual(['3']);
    expect(await pruneOnce(pool, cutoff, 2)).toEqual({ sagas: 0, deadLetters: 0 });
  });

  it('skips a saga another transaction holds and forgets it on a later prune', async () => {
    await saga('9', 'failed', before);
    const holder = await pool.connect();
    try {
      await holder.query('BEGIN');
      await holder.query(`SELECT 1 FROM sagas WHERE task_id = '9' FOR UPDATE`);
      expect((await pruneOnce(pool, cutoff)).sagas).toBe(0);
      await holder.query('ROLLBACK');
    } finally {
      holder.release();
    }
    expect((await pruneOnce(pool, cutoff)).sagas).toBe(1);
    expect(await left('saga_events')).not.toContain('9');
  });
});
