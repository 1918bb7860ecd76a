import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import pg from 'pg';
import { parseSnowflake } from '@labelflow/idgen';
import { createLogger } from '@labelflow/telemetry';
import { createTestDatabase, uniqueName, createTestPool } from '@labelflow/testing';
import { createIdSource, idgenMigration } from './index';

const infra = inject('infra');
const logger = createLogger({ service: 'ids-test', level: 'silent' });

describe('the service id source', () => {
  let pool: pg.Pool;
  let drop: () => Promise<void>;
  beforeAll(async () => {
    const db = await createTestDatabase(infra.pgUrl, uniqueName('ids'));
    drop = db.drop;
    pool = createTestPool(db.url, 8);
    await pool.query(idgenMigration.sql);
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
});
