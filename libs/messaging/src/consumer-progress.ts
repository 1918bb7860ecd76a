import type { Admin } from 'kafkajs';
import type { Logger } from '@labelflow/telemetry';
import type { ConsumerMetrics } from './consumer-metrics';

export interface ProgressProbeDeps {
  /** Connected before `start` and disconnected after `stop` by the loop. */
  readonly admin: Admin;
  readonly groupId: string;
  readonly topics: readonly string[];
  readonly everyMs: number;
  readonly metrics: ConsumerMetrics;
  readonly log: Logger;
}

export interface ProgressProbe {
  start(): void;
  stop(): void;
  /** See ConsumerLoop.caughtUpTo. */
  caughtUpTo(): number | undefined;
}

/**
 * Progress probes: the topics' high watermarks taken at an instant, then compared with the
 * group's committed offsets until the group has passed them. The newest probe it passed is how
 * far the group has caught up: everything produced before that instant was consumed.
 *
 * The same two admin calls give the group's lag per partition (`consumer_lag_messages`), so the
 * metric costs no extra round trip. The offsets are the group's, not this member's: every member
 * reports every partition, and dashboards take the max across instances, never the sum.
 */
export function createProgressProbe({ admin, groupId, topics, everyMs, metrics, log }: ProgressProbeDeps): ProgressProbe {
  const probes: { readonly at: number; readonly highs: ReadonlyMap<string, number> }[] = [];
  let caughtUp: number | undefined;
  let timer: NodeJS.Timeout | undefined;

  async function probe(): Promise<void> {
    const at = Date.now();
    const highs = new Map<string, number>();
    const lows = new Map<string, number>();
    for (const topic of topics) {
      for (const p of await admin.fetchTopicOffsets(topic)) {
        highs.set(`${topic}/${p.partition}`, Number(p.high));
        lows.set(`${topic}/${p.partition}`, Number(p.low));
      }
    }
    probes.push({ at, highs });
    const committed = new Map<string, number>();
    for (const t of await admin.fetchOffsets({ groupId, topics: [...topics] })) {
      for (const p of t.partitions) committed.set(`${t.topic}/${p.partition}`, Number(p.offset));
    }
    reportLag(highs, lows, committed);
    while (probes.length > 0 && [...probes[0]!.highs].every(([tp, high]) => high <= 0 || (committed.get(tp) ?? -1) >= high)) {
      caughtUp = probes.shift()!.at;
      metrics.caughtUpGauge?.set(caughtUp / 1000);
    }
    // Bounded: a group far behind keeps only the newest probes, and catches up to those.
    if (probes.length > 120) probes.splice(0, probes.length - 120);
  }

  function reportLag(highs: ReadonlyMap<string, number>, lows: ReadonlyMap<string, number>, committed: ReadonlyMap<string, number>): void {
    if (!metrics.lag) return;
    for (const [tp, high] of highs) {
      const slash = tp.lastIndexOf('/');
      // No commit yet (-1) or one below the log start (retention deleted it): the group resumes
      // from the log start, so only what is still on the partition is behind. The high watermark
      // was read before the commits, so a group that moved in between would read negative.
      const from = Math.max(committed.get(tp) ?? -1, lows.get(tp) ?? 0);
      metrics.lag.set({ group: groupId, topic: tp.slice(0, slash), partition: tp.slice(slash + 1) }, Math.max(0, high - from));
    }
  }

  function schedule(): void {
    timer = setTimeout(() => {
      probe()
        .then(() => metrics.probeRuns?.inc({ result: 'ok' }))
        .catch((error: Error) => {
          metrics.probeRuns?.inc({ result: 'failed' });
          log.debug({ err: error }, 'progress probe failed; trying again');
        })
        .finally(() => {
          if (timer) schedule();
        });
    }, everyMs);
    timer.unref();
  }

  return {
    start: schedule,
    stop() {
      clearTimeout(timer);
      timer = undefined;
    },
    caughtUpTo: () => caughtUp,
  };
}
