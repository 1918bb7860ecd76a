import type { ServiceContext, Sweeper } from '@labelflow/service-kit';
import type { SagaMonitorConfig } from '../config';
import { sweepRecord } from './record';
import { claimDueSagas, loadSagaForUpdate, saveSagasMany } from './repository';

/**
 * Step deadlines as durable deadlines: a watch is a row until the sweeper finds it due, then the
 * alert is decided, the watch marked alerting and the alert's notice written, all in the sweep's
 * transaction; the metric, log line and webhook follow from the notice once it committed.
 *
 * The sweep's clock never runs ahead of the consumer (sweepClock, caughtUpTo): a QaStarted that
 * waits unread in Kafka while the monitor catches up is not reported missing. Exactly once across
 * instances: the claim locks the task's row with SKIP LOCKED, and the decision re-reads the watches
 * under that lock, so a watch that just closed or already alerted raises nothing.
 */
export function alertSweeper(ctx: ServiceContext<SagaMonitorConfig>): Sweeper {
  return {
    name: 'saga-alerts',
    factsOf: (taskId) => ({ taskId }),
    claimDue: (tx, limit, now) => claimDueSagas(tx, limit, now),
    fire: async (tx, taskId, now) => {
      const before = await loadSagaForUpdate(tx, taskId);
      if (!before) return [];
      const result = sweepRecord(before, now.toISOString());
      if (!result.ok) {
        ctx.logger.debug({ taskId, reason: result.reason }, 'saga step no longer due');
        return [];
      }
      await saveSagasMany(tx, [{ before, after: result.state }]);
      // The monitor publishes nothing: an alert is a row, a notice and what the notice becomes.
      return [];
    },
  };
}
