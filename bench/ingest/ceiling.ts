// The raw ceiling of a bulk import: the same NDJSON lines parsed in this process and written with
// one INSERT … SELECT unnest(…) per batch into a fresh copy of task-svc's tasks table. No HTTP, no
// outbox, no job bookkeeping: what PostgreSQL alone takes for the rows. The rows are the ones the
// endpoint writes, task numbers included (`TASK-n`, one per line, as the endpoint draws them): a
// ceiling without them skipped one unique index the endpoint must maintain.
import type pg from 'pg';
import { composeSnowflake } from '@labelflow/idgen';
import { importFileChunks, type ImportFileOptions } from '../../tools/producer/src/ndjson';

export interface CeilingRun {
  readonly lines: number;
  readonly created: number;
  readonly alreadyPresent: number;
  readonly ms: number;
  /** Per committed batch, ms (one INSERT, autocommit). */
  readonly batchMs: readonly number[];
}

const INSERT = `
INSERT INTO tasks (task_id, project_id, title, data_uri, task_number, status, attempt, version, external_id)
SELECT id, $2::uuid, title, data_uri, task_number, 'open', 1, 1, external_id
  FROM unnest($1::text[], $3::text[], $4::text[], $6::text[], $5::text[]) AS l(id, title, data_uri, task_number, external_id)
ON CONFLICT (project_id, external_id) WHERE external_id IS NOT NULL DO NOTHING`;

/** Writes the file's lines into `tasks` of `pool`'s database, `batch` lines per INSERT, timed from the first byte. */
export async function runCeiling(pool: pg.Pool, projectId: string, file: ImportFileOptions, batch: number, workerId: number): Promise<CeilingRun> {
  const batchMs: number[] = [];
  let lines = 0;
  let created = 0;
  let sequence = 0;
  let ms0 = Date.now();
  let taskNumber = 0;
  const cols: [string[], string[], string[], string[], string[]] = [[], [], [], [], []];
  const flush = async () => {
    if (cols[0].length === 0) return;
    const s = performance.now();
    const res = await pool.query(INSERT, [cols[0], projectId, cols[1], cols[2], cols[3], cols[4]]);
    batchMs.push(performance.now() - s);
    created += res.rowCount ?? 0;
    for (const c of cols) c.length = 0;
  };
  const t0 = performance.now();
  let rest = '';
  for await (const chunk of importFileChunks(file)) {
    const text = rest + chunk.toString('utf8');
    const parts = text.split('\n');
    rest = parts.pop() ?? '';
    for (const raw of parts) {
      lines++;
      const v = JSON.parse(raw) as { externalId: string; title: string; dataUri: string };
      // Snowflake ids as the service issues them: 4096 per millisecond per worker.
      if (sequence === 4096) {
        sequence = 0;
        ms0++;
      }
      cols[0].push(composeSnowflake({ timestampMs: ms0, workerId, sequence: sequence++ }));
      cols[1].push(v.title);
      cols[2].push(v.dataUri);
      cols[3].push(v.externalId);
      cols[4].push(`TASK-${++taskNumber}`);
      if (cols[0].length >= batch) await flush();
    }
  }
  await flush();
  return { lines, created, alreadyPresent: lines - created, ms: performance.now() - t0, batchMs };
}
