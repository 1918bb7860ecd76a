import { randomUUID } from 'node:crypto';
import type pg from 'pg';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { migrate } from '@labelflow/service-kit';
import { freshDatabase } from '@labelflow/testing';
import { migrations } from './migrations';

const infra = inject('infra');

describe('billing-svc migration 9: payouts per currency', () => {
  let pool: pg.Pool;
  // The database as billing-svc left it before payouts had a currency.
  const db = freshDatabase(infra.pgUrl, 'billingmig', (p) => migrate(p, migrations.filter((m) => m.version !== 9)));
  beforeAll(async () => void (pool = await db.open()));
  afterAll(() => db.close());

  it("splits each annotator's single balance into one payout per currency, as the ledger's credits and reversals in each project's currency add up", async () => {
    const [eur, usd] = [randomUUID(), randomUUID()];
    for (const [projectId, currency] of [[eur, 'EUR'], [usd, 'USD']]) {
      await pool.query("INSERT INTO projects (project_id, name, currency, price_per_task, balance, version) VALUES ($1, 'p', $2, 100, 0, 1)", [projectId, currency]);
    }
    const book = (projectId: string, task: string, kind: string, annotatorId: string | null, amount: number) =>
      pool.query('INSERT INTO ledger (project_id, task_id, attempt, kind, annotator_id, amount) VALUES ($1, $2, 1, $3, $4, $5)', [projectId, task, kind, annotatorId, amount]);
    await book(eur, 't1', 'credit', 'ann-a', 100);
    await book(usd, 't2', 'credit', 'ann-a', 70);
    await book(usd, 't3', 'credit', 'ann-a', 30);
    await book(usd, 't3', 'reversal', 'ann-a', 30);
    await book(eur, 't4', 'credit', 'ann-b', 50);
    await book(eur, 't4', 'debit', null, 50);
    // The single balances of before: ann-a's summed two currencies; ann-c was approved but never paid.
    await pool.query("INSERT INTO payouts (annotator_id, balance) VALUES ('ann-a', 170), ('ann-b', 50), ('ann-c', 0)");

    expect(await migrate(pool, migrations)).toEqual([9]);

    const { rows } = await pool.query<{ annotator_id: string; currency: string; balance: string }>('SELECT annotator_id, currency, balance FROM payouts ORDER BY annotator_id, currency');
    expect(rows.map((r) => [r.annotator_id, r.currency, Number(r.balance)])).toEqual([
      ['ann-a', 'EUR', 100],
      ['ann-a', 'USD', 70],
      ['ann-b', 'EUR', 50],
    ]);
    // The constraints the code relies on survived the swap of tables.
    await expect(pool.query("INSERT INTO payouts (annotator_id, currency, balance) VALUES ('ann-a', 'EUR', 1)")).rejects.toMatchObject({ code: '23505' });
    await expect(pool.query("INSERT INTO payouts (annotator_id, currency, balance) VALUES ('ann-d', 'EUR', -1)")).rejects.toMatchObject({ code: '23514' });
  });
});
