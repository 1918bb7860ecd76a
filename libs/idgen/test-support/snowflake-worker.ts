// Child process of the multi-process Snowflake test: leases a worker id from the shared database,
// generates COUNT ids and writes them as little-endian u64s to OUT. Prints one JSON line on stdout.
// With PEERS, waits until PEERS leases of the namespace are held before generating, so all the
// processes hold their worker ids (and generate) at the same time.
// Usage: node --import tsx snowflake-worker.ts <dbUrl> <namespace> <count> <outFile> [peers]
import { writeFile } from 'node:fs/promises';
import pg from 'pg';
import { createSnowflake } from '../src/snowflake';
import { createWorkerLease } from '../src/lease';

const [dbUrl, namespace, countArg, outFile, peersArg = '1'] = process.argv.slice(2);
if (!dbUrl || !namespace || !countArg || !outFile) throw new Error('usage: snowflake-worker <dbUrl> <namespace> <count> <outFile>');
const count = Number(countArg);

const pool = new pg.Pool({ connectionString: dbUrl, max: 2 });
const generator: { current?: ReturnType<typeof createSnowflake> } = {};
const lease = createWorkerLease({ pool, namespace, owner: `snowflake-worker:${process.pid}`, ttlMs: 30_000, renewEveryMs: 5_000, lastIssuedMs: () => generator.current?.lastIssuedMs() ?? 0 });
const workerId = await lease.acquire();
for (let waited = 0; ; waited += 10) {
  const { rows } = await pool.query<{ n: number }>('SELECT count(*)::int AS n FROM idgen_worker_leases WHERE namespace = $1 AND expires_at > now()', [namespace]);
  if ((rows[0]?.n ?? 0) >= Number(peersArg)) break;
  if (waited > 30_000) throw new Error(`peers did not show up: ${rows[0]?.n} of ${peersArg} leases`);
  await new Promise((r) => setTimeout(r, 10));
}
const issuing = createSnowflake({ workerId, isValid: () => lease.valid, issuedUpToMs: lease.issuedUpToMs });
generator.current = issuing;

const ids = new BigUint64Array(count);
const started = performance.now();
for (let i = 0; i < count; i++) ids[i] = BigInt(await issuing.next());
const elapsedMs = performance.now() - started;
await writeFile(outFile, new Uint8Array(ids.buffer));
await lease.release();
await pool.end();
process.stdout.write(`${JSON.stringify({ workerId, count, elapsedMs: Math.round(elapsedMs) })}\n`);
