import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import pg from 'pg';
import { parseSnowflake } from '@labelflow/idgen';
import { captureLogs, createTestDatabase, eventually, uniqueName, createTestPool } from '@labelflow/testing';
import { createIdSource, idgenLastIssuedMigration, idgenMigration } from './index';

const infra = inject('infra');
const logger = captureLogs({ service: 'ids-test' }).logger;

describe('the service id source', () => {
  let pool: pg.Pool;
  let drop: () => Promise<void>;
  beforeAll(async () => {
    const db = await createTestDatabase(infra.pgUrl, uniqueName('ids'));
    drop = db.drop;
    pool = createTestPool(db.url, 8);
    await pool.query(idgenMigration.sql);
    await pool.query(idgenLastIssuedMigration.sql);
  });
  afterAll(async () => {
    await pool.end();
    await drop();
  });

  it('gives every process of a service its own worker id within the service share, and ids that never repeat', async () => {
    const sources = await Promise.all([1, 2, 3].map(() => createIdSource({ pool, service: 'qa-svc', logger })));
    const workers = sources.map((s) => s.workerId());
    expect(new Set(workers).size).toBe(3);
    for (const w of workers) expect(w >= 512 && w < 768).toBe(true);
    const ids = (await Promise.all(sources.map(async (s) => Promise.all(Array.from({ length: 2_000 }, () => s.next()))))).flat();
    expect(new Set(ids).size).toBe(ids.length);
    for (const id of ids) expect(workers).toContain(parseSnowflake(id).workerId);
    await Promise.all(sources.map((s) => s.close()));
  });

  it('puts two services on disjoint worker ids even when they lease slot 0 of their own tables', async () => {
    const task = await createIdSource({ pool, service: 'task-svc', logger });
    const billing = await createIdSource({ pool, service: 'billing-svc', logger });
    expect(task.workerId()).toBeLessThan(256);
    expect(billing.workerId()).toBeGreaterThanOrEqual(768);
    await Promise.all([task.close(), billing.close()]);
  });

  it('refuses ids with a retriable error once closed, and frees its worker id for the next process', async () => {
    const first = await createIdSource({ pool, service: 'label-svc', logger });
    const worker = first.workerId();
    await first.close();
    await expect(first.next()).rejects.toMatchObject({ retriable: true });
    const next = await createIdSource({ pool, service: 'label-svc', logger });
    expect(next.workerId()).toBe(worker);
    await next.close();
  });

  it('keeps trying to lease a new worker id after losing its own, while every id is taken, and issues ids again once one frees up', async () => {
    const logs = captureLogs({ service: 'ids-test', level: 'error' });
    const source = await createIdSource({ pool, service: 'task-svc', logger: logs.logger, lease: { ttlMs: 1_000, renewEveryMs: 50 } });
    const before = await source.next();
    // Another holder takes every worker id of the service, ours included: the next renewal finds
    // the lease gone, and the new lease cannot be had until one frees up.
    await pool.query(
      `INSERT INTO idgen_worker_leases (namespace, worker_id, owner, expires_at)
       SELECT 'task-svc', g, 'squatter', now() + interval '1 hour' FROM generate_series(0, 255) AS g
       ON CONFLICT (namespace, worker_id) DO UPDATE SET owner = 'squatter', expires_at = EXCLUDED.expires_at`,
    );
    await eventually(async () => expect(source.next()).rejects.toMatchObject({ code: 'ID_UNAVAILABLE', retriable: true }));
    // Several failed attempts, each one logged and retried: an unhandled one would end the process.
    const failures = () => logs.lines.filter((l) => l.msg === 'leasing a new id worker failed; retrying');
    await eventually(() => expect(failures().length).toBeGreaterThanOrEqual(3));
    expect(failures().map((l) => l.retryInMs).slice(0, 3)).toEqual([100, 200, 400]);
    await expect(source.next()).rejects.toMatchObject({ code: 'ID_UNAVAILABLE' });

    await pool.query("DELETE FROM idgen_worker_leases WHERE namespace = 'task-svc' AND owner = 'squatter' AND worker_id = 7");
    const after = await eventually(async () => source.next(), { timeoutMs: 15_000 });
    expect(parseSnowflake(after).workerId).toBe(7);
    expect(BigInt(after) > BigInt(before)).toBe(true);
    await source.close();
    await pool.query("DELETE FROM idgen_worker_leases WHERE namespace = 'task-svc'");
  });
});
