import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { createTestDatabase, uniqueName } from '@labelflow/testing';
import { createPool, withTransaction, type Pool } from './db';

const infra = inject('infra');

describe('the service pool', () => {
  let pool: Pool;
  let drop: () => Promise<void>;
  beforeAll(async () => {
    const db = await createTestDatabase(infra.pgUrl, uniqueName('pool'));
    drop = db.drop;
    pool = createPool(db.url, 2);
  });
  afterAll(async () => {
    await pool.end();
    await drop();
  });

  it('refuses a second connection inside a transaction, so pool starvation shows in every test and not only under load', async () => {
    await expect(withTransaction(pool, async () => pool.query('SELECT 1'))).rejects.toThrow(/inside a transaction/);
    await expect(withTransaction(pool, async (tx) => (await tx.query<{ one: number }>('SELECT 1 AS one')).rows[0]?.one)).resolves.toBe(1);
  });

  it('still serves queries outside transactions, also right after one ended', async () => {
    await withTransaction(pool, async (tx) => tx.query('SELECT 1'));
    expect((await pool.query<{ two: number }>('SELECT 2 AS two')).rows[0]?.two).toBe(2);
  });
});
