import { withTransaction, type Chore, type ServiceContext } from '@labelflow/service-kit';
import type { SagaMonitorConfig } from '../config';
import { pruneEndedSagas, type Pruned } from './repository';

const CHUNK = 1_000;
const EVERY_MS = 10 * 60_000;

/**
 * Forgets what is older than the retention, `chunk` sagas per transaction so no prune holds many
 * rows locked at once, until a chunk comes back short or `signal` is aborted (the service closes).
 * Returns what went.
 */
export async function pruneOnce(pool: ServiceContext['pool'], cutoff: Date, chunk = CHUNK, signal?: AbortSignal): Promise<Pruned> {
  let sagas = 0;
  let deadLetters = 0;
  while (signal?.aborted !== true) {
    const pruned = await withTransaction(pool, (tx) => pruneEndedSagas(tx, cutoff, chunk));
    sagas += pruned.sagas;
    deadLetters += pruned.deadLetters;
    if (pruned.sagas < chunk && pruned.deadLetters < chunk) return { sagas, deadLetters };
  }
  return { sagas, deadLetters };
}

/**
 * The monitor is a view, not the record (each service keeps its own): every consumed event is a
 * row, so without a bound its database grows with every saga ever run. A saga that ended more
 * than MONITOR_RETENTION_HOURS ago goes with its timeline, and so does a dead letter recorded
 * that long ago; 0 keeps everything.
 */
export function retentionChore(ctx: ServiceContext<SagaMonitorConfig>): Chore[] {
  const hours = ctx.config.MONITOR_RETENTION_HOURS;
  if (hours === 0) return [];
  const pruned = ctx.metrics.counter('saga_monitor_pruned_total', 'Rows the saga monitor forgot after MONITOR_RETENTION_HOURS, by kind (saga with its timeline, dead letter)', ['kind']);
  return [
    {
      name: 'saga-retention',
      everyMs: EVERY_MS,
      run: async (signal) => {
        const gone = await pruneOnce(ctx.pool, new Date(ctx.now().getTime() - hours * 3600_000), CHUNK, signal);
        pruned.inc({ kind: 'saga' }, gone.sagas);
        pruned.inc({ kind: 'dead_letter' }, gone.deadLetters);
        if (gone.sagas + gone.deadLetters > 0) ctx.logger.info({ ...gone, retentionHours: hours }, 'sagas and dead letters past their retention forgotten');
      },
    },
  ];
}
