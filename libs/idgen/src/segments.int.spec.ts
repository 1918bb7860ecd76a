import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import pg from 'pg';
import { createTestDatabase, uniqueName, createTestPool } from '@labelflow/testing';
import { createSegmentAllocator, ensureIdgenSchema } from './index';
import { runTsxScript } from '../test-support/spawn-tsx';

const infra = inject('infra');

describe('the segment allocator on PostgreSQL', () => {
  let url: string;
  let pool: pg.Pool;
  let drop: () => Promise<void>;
  beforeAll(async () => {
    const db = await createTestDatabase(infra.pgUrl, uniqueName('idgen_seg'));
    url = db.url;
    drop = db.drop;
    pool = createTestPool(db.url, 10);
    await ensureIdgenSchema(pool);
  });
  afterAll(async () => {
    await pool.end();
    await drop();
  });

  it('serves a cold burst of 300 concurrent calls from one segment fetch', async () => {
    const fetched: boolean[] = [];
    const alloc = createSegmentAllocator({ pool, segmentSize: 1000, onSegmentFetched: (_s, _f, _t, prefetch) => fetched.push(prefetch) });
    const got = await Promise.all(Array.from({ length: 300 }, () => alloc.next('burst')));
    expect(new Set(got).size).toBe(300);
    expect(Math.min(...got)).toBe(1);
    expect(fetched).toEqual([false]);
  });

  it('skips the unused rest of a segment held by a stopped allocator (gaps, never duplicates)', async () => {
    const first = createSegmentAllocator({ pool, segmentSize: 10, prefetchAt: 0 });
    expect([await first.next('gaps'), await first.next('gaps')]).toEqual([1, 2]);
    const second = createSegmentAllocator({ pool, segmentSize: 10 }); // "after a restart"
    expect(await second.next('gaps')).toBe(11);
  });

  it('lets 4 processes draw 2,000 task numbers each for one scope concurrently: no duplicates, prefetching, about one round trip per segment', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'idgen-seg-'));
    try {
      const perProcess = 2_000;
      const segmentSize = 50;
      const files = [0, 1, 2, 3].map((i) => join(dir, `numbers-${i}.bin`));
      const started = performance.now();
      const outputs = await Promise.all(files.map((f) => runTsxScript('./segment-worker.ts', [url, 'PRJ', String(perProcess), String(segmentSize), '8', f, '4'])));
      const wallMs = Math.round(performance.now() - started);
      const reports = outputs.map((o) => JSON.parse(o.trim()) as { elapsedMs: number; fetches: { from: number; to: number; prefetch: boolean }[] });

      const seen = new Set<number>();
      for (const f of files) {
        const buf = await readFile(f);
        const numbers = new Uint32Array(buf.buffer, buf.byteOffset, buf.byteLength / 4);
        expect(numbers.length).toBe(perProcess);
        for (let k = 1; k < numbers.length; k++) expect(numbers[k]! > numbers[k - 1]!).toBe(true); // in order within a process
        for (const n of numbers) seen.add(n);
      }
      expect(seen.size).toBe(4 * perProcess);

      // Segments claimed by different processes never overlap.
      const segments = reports.flatMap((r) => r.fetches).sort((a, b) => a.from - b.from);
      // The processes really interleaved: no process got one contiguous run of segments.
      const owner = new Map(reports.flatMap((r, i) => r.fetches.map((x) => [x.from, i] as const)));
      let switches = 0;
      for (let k = 1; k < segments.length; k++) if (owner.get(segments[k]!.from) !== owner.get(segments[k - 1]!.from)) switches++;
      expect(switches).toBeGreaterThan(3);
      for (let k = 1; k < segments.length; k++) expect(segments[k]!.from).toBeGreaterThan(segments[k - 1]!.to);
      for (const r of reports) {
        expect(r.fetches.length).toBeGreaterThanOrEqual(perProcess / segmentSize);
        expect(r.fetches.length).toBeLessThanOrEqual(perProcess / segmentSize + 1); // at most one prefetched and unused
        expect(r.fetches.filter((x) => x.prefetch).length).toBeGreaterThan(0);
      }
      const { rows } = await pool.query<{ next_value: string }>("SELECT next_value FROM idgen_segments WHERE scope = 'PRJ'");
      expect(Number(rows[0]!.next_value)).toBe(1 + segments.length * segmentSize);
      console.error(`[idgen] 4 x ${perProcess} task numbers: wall ${wallMs} ms, ${segments.length} round trips, ${segments.filter((s) => s.prefetch).length} prefetched, ${switches} owner switches`);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});
