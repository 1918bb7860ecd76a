import type { Admin } from 'kafkajs';
import type { Logger } from '@labelflow/telemetry';
import type { ConsumerMetrics } from './consumer-metrics';

/** Offsets per partition, keyed `topic/partition`. */
export type PartitionOffsets = ReadonlyMap<string, number>;

/** Where the probe reads the offsets it compares. */
export interface OffsetsSource {
  /** Each partition's high watermark; its log start offset too when `logStart` (a source may give it unasked). */
  topicOffsets(topics: readonly string[], logStart: boolean): Promise<{ readonly highs: PartitionOffsets; readonly lows?: PartitionOffsets }>;
  /** The group's committed offset per partition: -1 where it committed none. */
  committedOffsets(groupId: string, topics: readonly string[]): Promise<PartitionOffsets>;
}

/**
 * The offsets through a kafkajs admin: two ListOffsets requests per topic (the high watermarks and
 * the log starts, whether asked or not), a FindCoordinator and an OffsetFetch, and often a Metadata
 * request per topic, about 12 requests a probe for a service reading four topics. Services use
 * `createOffsetsReader` (three requests a probe); this stays the default for a loop given only a
 * kafkajs client.
 */
export function kafkajsOffsets(admin: Admin): OffsetsSource {
  return {
    async topicOffsets(topics) {
      const highs = new Map<string, number>();
      const lows = new Map<string, number>();
      for (const topic of topics) {
        for (const p of await admin.fetchTopicOffsets(topic)) {
          highs.set(`${topic}/${p.partition}`, Number(p.high));
          lows.set(`${topic}/${p.partition}`, Number(p.low));
        }
      }
      return { highs, lows };
    },
    async committedOffsets(groupId, topics) {
      const committed = new Map<string, number>();
      for (const t of await admin.fetchOffsets({ groupId, topics: [...topics] })) {
        for (const p of t.partitions) committed.set(`${t.topic}/${p.partition}`, Number(p.offset));
      }
      return committed;
    },
  };
}

/** A probe asks for the log start offsets on its first run and then once in this many runs. */
export const LOG_START_EVERY = 30;

export interface ProgressProbeDeps {
  /** Ready before `start`, and closed after `stop`, by its owner. */
  readonly source: OffsetsSource;
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

/** Where the group resumes on a partition: its commit, or the log start when it has none or retention deleted past it. */
const resumesAt = (committed: PartitionOffsets, lows: PartitionOffsets, tp: string): number => Math.max(committed.get(tp) ?? -1, lows.get(tp) ?? 0);

/**
 * Progress probes: the topics' high watermarks taken at an instant, then compared with the
 * group's committed offsets until the group has passed them. The newest probe it passed is how
 * far the group has caught up: everything produced before that instant was consumed.
 *
 * The same two reads give the group's lag per partition (`consumer_lag_messages`), so the metric
 * costs no extra round trip. The offsets are the group's, not this member's: every member reports
 * every partition, and dashboards take the max across instances, never the sum. The lag counts
 * from the log start where the group is behind it (no commit yet, or retention deleted what it had
 * not read); log starts move only with retention, so they are read once in `LOG_START_EVERY` probes.
 */
export function createProgressProbe({ source, groupId, topics, everyMs, metrics, log }: ProgressProbeDeps): ProgressProbe {
  const probes: { readonly at: number; readonly highs: PartitionOffsets }[] = [];
  let caughtUp: number | undefined;
  let timer: NodeJS.Timeout | undefined;
  let lows: PartitionOffsets = new Map();
  /** The commits the last probe read; undefined before the first. */
  let previous: PartitionOffsets | undefined;
  /** Probes until the log starts are asked for again; 0: the next one asks. */
  let untilLogStart = 0;

  async function probe(): Promise<void> {
    const at = Date.now();
    const read = await source.topicOffsets(topics, untilLogStart <= 0);
    if (read.lows) {
      lows = read.lows;
      untilLogStart = LOG_START_EVERY;
    }
    untilLogStart--;
    const { highs } = read;
    probes.push({ at, highs });
    const committed = await source.committedOffsets(groupId, topics);
    reportLag(highs, lows, committed);
    // A partition whose records were all deleted before the group committed there (log start =
    // high watermark: nothing left to fetch, so nothing is ever committed) is passed too.
    const passed = (tp: string, high: number) => high <= 0 || resumesAt(committed, lows, tp) >= high;
    while (probes.length > 0 && [...probes[0]!.highs].every(([tp, high]) => passed(tp, high))) {
      caughtUp = probes.shift()!.at;
      metrics.caughtUpGauge?.set(caughtUp / 1000);
    }
    // Log starts are read rarely, and one read before a deletion understates where the group
    // resumes: while a partition holds the oldest probe up with a commit that has not moved since
    // the last probe, at or below the log start known, read them again.
    const oldest = probes[0];
    const stuck = (tp: string, high: number, before: PartitionOffsets) => {
      const at = committed.get(tp) ?? -1;
      return !passed(tp, high) && at === (before.get(tp) ?? -1) && at <= (lows.get(tp) ?? 0);
    };
    const before = previous;
    if (oldest && before && [...oldest.highs].some(([tp, high]) => stuck(tp, high, before))) untilLogStart = 0;
    previous = committed;
    // Bounded: a group far behind keeps only the newest probes, and catches up to those.
    if (probes.length > 120) probes.splice(0, probes.length - 120);
  }

  function reportLag(highs: PartitionOffsets, lows: PartitionOffsets, committed: PartitionOffsets): void {
    if (!metrics.lag) return;
    for (const [tp, high] of highs) {
      const slash = tp.lastIndexOf('/');
      // No commit yet (-1) or one below the log start (retention deleted it): the group resumes
      // from the log start, so only what is still on the partition is behind. The high watermark
      // was read before the commits, so a group that moved in between would read negative.
      const from = resumesAt(committed, lows, tp);
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
