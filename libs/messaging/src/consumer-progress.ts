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
 */
export function createProgressProbe({ admin, groupId, topics, everyMs, metrics, log }: ProgressProbeDeps): ProgressProbe {
  const probes: { readonly at: number; readonly highs: ReadonlyMap<string, number> }[] = [];
  let caughtUp: number | undefined;
  let timer: NodeJS.Timeout | undefined;

  async function probe(): Promise<void> {
    const at = Date.now();
    const highs = new Map<string, number>();
    for (const topic of topics) {
      for (const p of await admin.fetchTopicOffsets(topic)) highs.set(`${topic}/${p.partition}`, Number(p.high));
    }
    probes.push({ at, highs });
    const committed = new Map<string, number>();
    for (const t of await admin.fetchOffsets({ groupId, topics: [...topics] })) {
      for (const p of t.partitions) committed.set(`${t.topic}/${p.partition}`, Number(p.offset));
    }
    while (probes.length > 0 && [...probes[0]!.highs].every(([tp, high]) => high <= 0 || (committed.get(tp) ?? -1) >= high)) {
      caughtUp = probes.shift()!.at;
      metrics.caughtUpGauge?.set(caughtUp / 1000);
    }
    // Bounded: a group far behind keeps only the newest probes, and catches up to those.
    if (probes.length > 120) probes.splice(0, probes.length - 120);
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
