// Child process of the multi-process segment test: draws COUNT numbers of SCOPE (CONCURRENCY calls
// in flight at a time), writes them as little-endian u32s to OUT and prints its fetch statistics.
// With PEERS, first waits until PEERS workers checked in (a counter row in idgen_segments), so the
// processes really draw at the same time.
// Usage: node --import tsx segment-worker.ts <dbUrl> <scope> <count> <segmentSize> <concurrency> <outFile> [peers]
import { writeFile } from 'node:fs/promises';
import pg from 'pg';
import { createSegmentAllocator } from '../src/segments';

const [dbUrl, scope, countArg, sizeArg, concurrencyArg, outFile, peersArg = '1'] = process.argv.slice(2);
if (!dbUrl || !scope || !countArg || !sizeArg || !concurrencyArg || !outFile) throw new Error('usage: segment-worker <dbUrl> <scope> <count> <segmentSize> <concurrency> <outFile>');
const count = Number(countArg);
const concurrency = Number(concurrencyArg);

const pool = new pg.Pool({ connectionString: dbUrl, max: 2 });
const fetches: { from: number; to: number; prefetch: boolean }[] = [];
const allocator = createSegmentAllocator({
  pool,
  segmentSize: Number(sizeArg),
  onSegmentFetched: (_scope, from, to, prefetch) => fetches.push({ from, to, prefetch }),
});

const barrier = `barrier:${scope}`;
await pool.query('INSERT INTO idgen_segments (scope, next_value) VALUES ($1, 2) ON CONFLICT (scope) DO UPDATE SET next_value = idgen_segments.next_value + 1', [barrier]);
for (let waited = 0; ; waited += 10) {
  const { rows } = await pool.query<{ n: string }>('SELECT next_value - 1 AS n FROM idgen_segments WHERE scope = $1', [barrier]);
  if (Number(rows[0]?.n ?? 0) >= Number(peersArg)) break;
  if (waited > 30_000) throw new Error(`peers did not show up: ${rows[0]?.n} of ${peersArg}`);
  await new Promise((r) => setTimeout(r, 10));
}

const numbers = new Uint32Array(count);
let drawn = 0;
const started = performance.now();
while (drawn < count) {
  const batch = Math.min(concurrency, count - drawn);
  const got = await Promise.all(Array.from({ length: batch }, () => allocator.next(scope)));
  for (const n of got) numbers[drawn++] = n;
}
const elapsedMs = performance.now() - started;
await writeFile(outFile, new Uint8Array(numbers.buffer));
await pool.end();
process.stdout.write(`${JSON.stringify({ count, elapsedMs: Math.round(elapsedMs), fetches })}\n`);
