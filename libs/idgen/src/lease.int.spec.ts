import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import pg from 'pg';
import { createTestDatabase, eventually, uniqueName, createTestPool } from '@labelflow/testing';
import { createSnowflake, createWorkerLease, ensureIdgenSchema, IdgenErrors, parseSnowflake } from './index';
import { runTsxScript } from '../test-support/spawn-tsx';

const infra = inject('infra');

describe('worker-id leases and Snowflake ids on PostgreSQL', () => {
  let url: string;
  let pool: pg.Pool;
  let drop: () => Promise<void>;
  beforeAll(async () => {
    const db = await createTestDatabase(infra.pgUrl, uniqueName('idgen_lease'));
    url = db.url;
    drop = db.drop;
    pool = createTestPool(db.url, 20);
    await Promise.all([ensureIdgenSchema(pool), ensureIdgenSchema(pool), ensureIdgenSchema(pool)]); // idempotent, concurrent-safe
  });
  afterAll(async () => {
    await pool.end();
    await drop();
  });

  const leaseIn = (namespace: string, over: Partial<Parameters<typeof createWorkerLease>[0]> = {}) => createWorkerLease({ pool, namespace, owner: 'test', ...over });

  it('gives twenty concurrent acquire() calls twenty distinct worker ids, the lowest ones', async () => {
    const leases = Array.from({ length: 20 }, () => leaseIn('concurrent'));
    const ids = await Promise.all(leases.map((l) => l.acquire()));
    expect(new Set(ids).size).toBe(20);
    expect([...ids].sort((a, b) => a - b)).toEqual(Array.from({ length: 20 }, (_, i) => i));
    expect(leases.every((l) => l.valid)).toBe(true);
    const { rows } = await pool.query<{ n: number }>("SELECT count(DISTINCT owner)::int AS n FROM idgen_worker_leases WHERE namespace = 'concurrent'");
    expect(rows[0]!.n).toBe(20);
    await Promise.all(leases.map((l) => l.release()));
  });

  it('reports NO_FREE_WORKER_ID when every id of the namespace is held by a live lease', async () => {
    const held = [leaseIn('full', { maxWorkers: 2 }), leaseIn('full', { maxWorkers: 2 })];
    await Promise.all(held.map((l) => l.acquire()));
    await expect(leaseIn('full', { maxWorkers: 2 }).acquire()).rejects.toMatchObject({ code: IdgenErrors.NO_FREE_WORKER_ID, retriable: true });
    await Promise.all(held.map((l) => l.release()));
  });

  it('reuses a released worker id', async () => {
    const a = leaseIn('released');
    const b = leaseIn('released');
    expect(await a.acquire()).toBe(0);
    expect(await b.acquire()).toBe(1);
    await a.release();
    expect(a.valid).toBe(false);
    const c = leaseIn('released');
    expect(await c.acquire()).toBe(0);
    await Promise.all([b.release(), c.release()]);
  });

  it('hands a released worker id on with its high-water mark, so the next holder never repeats a millisecond even with a lagging clock', async () => {
    let issuing: ReturnType<typeof createSnowflake> | undefined;
    const first = leaseIn('high-water', { lastIssuedMs: () => issuing?.lastIssuedMs() ?? 0 });
    const workerId = await first.acquire();
    expect(first.issuedUpToMs).toBe(0);
    issuing = createSnowflake({ workerId, isValid: () => first.valid, issuedUpToMs: first.issuedUpToMs });
    // The first holder's clock runs 2 s ahead of the next holder's. Fixed clocks: a stall of the
    // machine between the two holders must not let the real clock catch up with the first one's.
    const t = Date.now();
    const ahead = createSnowflake({ workerId, clock: () => t + 2_000, isValid: () => first.valid });
    issuing = ahead;
    const last = await ahead.next();
    await first.release();

    const second = leaseIn('high-water');
    expect(await second.acquire()).toBe(workerId);
    expect(second.issuedUpToMs).toBe(parseSnowflake(last).timestampMs);
    const lagging = createSnowflake({ workerId, clock: () => t, isValid: () => second.valid, issuedUpToMs: second.issuedUpToMs });
    await expect(lagging.next()).rejects.toMatchObject({ code: IdgenErrors.CLOCK_MOVED_BACKWARDS });
    const later = createSnowflake({ workerId, clock: () => t + 2_100, isValid: () => second.valid, issuedUpToMs: second.issuedUpToMs });
    expect(BigInt(await later.next()) > BigInt(last)).toBe(true);
    await second.release();
  });

  it('records the high-water mark with every renewal, not only on release', async () => {
    const lease = leaseIn('renewed-mark', { lastIssuedMs: () => 1_800_000_000_123 });
    const workerId = await lease.acquire();
    await lease.renew();
    const { rows } = await pool.query<{ ms: string }>("SELECT last_issued_ms::text AS ms FROM idgen_worker_leases WHERE namespace = 'renewed-mark' AND worker_id = $1", [workerId]);
    expect(rows[0]?.ms).toBe('1800000000123');
    await lease.release();
  });

  it('takes over an expired lease, and the old holder reports onLost on its next renewal and its generator refuses ids', async () => {
    const lost: number[] = [];
    const old = leaseIn('expired', { onLost: ({ workerId }) => lost.push(workerId) });
    const oldId = await old.acquire();
    const oldGenerator = createSnowflake({ workerId: old.workerId, isValid: () => old.valid });
    await oldGenerator.next();

    // Simulate a holder that stopped renewing (paused process, partition) until its lease expired.
    await pool.query("UPDATE idgen_worker_leases SET expires_at = now() - interval '1 second' WHERE namespace = 'expired' AND worker_id = $1", [oldId]);
    const taker = leaseIn('expired');
    expect(await taker.acquire()).toBe(oldId);

    expect(await old.renew()).toBe(false);
    expect(lost).toEqual([oldId]);
    expect(old.lost).toBe(true);
    expect(old.valid).toBe(false);
    await expect(oldGenerator.next()).rejects.toMatchObject({ code: IdgenErrors.LEASE_LOST });
    expect(await old.renew()).toBe(false);
    expect(lost).toHaveLength(1); // reported once

    // The old holder's release must not delete the new holder's row.
    await old.release();
    expect(await taker.renew()).toBe(true);
    const newGenerator = createSnowflake({ workerId: taker.workerId, isValid: () => taker.valid });
    expect(parseSnowflake(await newGenerator.next()).workerId).toBe(oldId);
    await taker.release();
  });

  it('renews in the background and notices a takeover without being asked', async () => {
    let lost = false;
    // Thirty renewals fit in the ttl: a stall of the event loop or of PostgreSQL on a busy machine
    // must last seconds, not a few hundred milliseconds, before the lease is rightly seen as lost.
    const lease = leaseIn('background', { ttlMs: 3_000, renewEveryMs: 100, onLost: () => (lost = true) });
    const id = await lease.acquire();
    const { rows: acquired } = await pool.query<{ first: Date }>("SELECT expires_at AS first FROM idgen_worker_leases WHERE namespace = 'background' AND worker_id = $1", [id]);
    const first = acquired[0]!.first;
    // Past the ttl it was acquired with, and renewed beyond it: only renewal keeps it valid.
    await eventually(async () => {
      const { rows } = await pool.query<{ past: boolean; renewed: boolean }>("SELECT now() > $2::timestamptz AS past, expires_at > now() AS renewed FROM idgen_worker_leases WHERE namespace = 'background' AND worker_id = $1", [id, first]);
      expect(rows[0]).toEqual({ past: true, renewed: true });
    });
    expect(lease.valid).toBe(true);
    await pool.query("UPDATE idgen_worker_leases SET owner = 'someone-else' WHERE namespace = 'background' AND worker_id = $1", [id]);
    await eventually(() => expect(lost).toBe(true));
    expect(lease.valid).toBe(false);
    await lease.release();
  });

  it('lets 4 processes generate 250,000 ids each concurrently with no duplicate and strictly increasing ids per worker', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'idgen-'));
    try {
      const perProcess = 250_000;
      const files = [0, 1, 2, 3].map((i) => join(dir, `ids-${i}.bin`));
      const started = performance.now();
      const outputs = await Promise.all(files.map((f) => runTsxScript('./snowflake-worker.ts', [url, 'multiprocess', String(perProcess), f, '4'])));
      const wallMs = Math.round(performance.now() - started);
      const reports = outputs.map((o) => JSON.parse(o.trim()) as { workerId: number; count: number; elapsedMs: number });
      expect(new Set(reports.map((r) => r.workerId)).size).toBe(4);

      const all = new BigUint64Array(4 * perProcess);
      const lastIds: string[] = [];
      for (const [i, f] of files.entries()) {
        const buf = await readFile(f);
        const ids = new BigUint64Array(buf.buffer, buf.byteOffset, buf.byteLength / 8);
        expect(ids.length).toBe(perProcess);
        const workerId = reports[i]!.workerId;
        for (let k = 0; k < ids.length; k++) {
          if (k > 0 && !(ids[k]! > ids[k - 1]!)) throw new Error(`worker ${workerId}: id #${k} ${ids[k]} is not greater than ${ids[k - 1]}`);
        }
        expect(parseSnowflake(ids[0]!.toString()).workerId).toBe(workerId);
        expect(parseSnowflake(ids[perProcess - 1]!.toString()).workerId).toBe(workerId);
        lastIds.push(ids[perProcess - 1]!.toString());
        all.set(ids, i * perProcess);
      }
      all.sort();
      let duplicates = 0;
      for (let k = 1; k < all.length; k++) if (all[k] === all[k - 1]) duplicates++;
      expect(duplicates).toBe(0);
      console.error(`[idgen] 4 x ${perProcess} ids: wall ${wallMs} ms (incl. process start), generation ms per process ${reports.map((r) => r.elapsedMs).join(', ')}`);
      // Every process released its lease on exit, leaving its worker id free with its high-water mark.
      const { rows } = await pool.query<{ live: boolean; ms: string }>("SELECT expires_at > now() AS live, last_issued_ms::text AS ms FROM idgen_worker_leases WHERE namespace = 'multiprocess' ORDER BY worker_id");
      expect(rows.map((r) => r.live)).toEqual([false, false, false, false]);
      const lastOf = new Map(reports.map((r, i) => [r.workerId, parseSnowflake(lastIds[i]!).timestampMs]));
      expect(rows.map((r) => Number(r.ms))).toEqual([...lastOf.entries()].sort(([a], [b]) => a - b).map(([, ms]) => ms));
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});

