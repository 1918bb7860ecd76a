// CPU of the processes an import keeps busy, per window (the endpoint's run, the ceiling's): task-svc,
// PostgreSQL (its postmaster, live children, and children that ended), the Kafka broker, this bench
// process, and whatever else ran on the machine. On a shared or throttled 2-core machine the rows/s
// of both contenders swing by ±15 % from run to run; the CPU each spends per 1,000 lines moves far
// less, and says which process an optimisation saved.
import { machineCpu } from '../common';
import { allStats, cmdline, listenerPid, localPort, readStat, ticksToMs, treeDelta, type ProcessTicks, type ProcStat } from '../proc';

export const CpuColumn = { taskSvc: 'task-svc', postgres: 'PostgreSQL', kafka: 'Kafka', driver: 'bench process', other: 'other' } as const;
export type CpuColumn = keyof typeof CpuColumn;

export interface CpuTargets {
  readonly taskSvc?: ProcStat;
  readonly postmaster?: ProcStat;
  readonly kafka?: ProcStat;
}

/** The processes to account: task-svc by its pid, PostgreSQL and Kafka by who listens on their local ports (absent when remote). */
export function cpuTargets(taskSvcPid: number | undefined, pgUrl: string, brokers: readonly string[]): CpuTargets {
  const pgPort = localPort(pgUrl, 5432);
  const postmaster = pgPort === undefined ? undefined : listenerPid(pgPort);
  const kafkaPort = brokers.length === 1 ? localPort(brokers[0] ?? '', 9092) : undefined;
  const broker = kafkaPort === undefined ? undefined : listenerPid(kafkaPort);
  return {
    taskSvc: taskSvcPid === undefined ? undefined : readStat(taskSvcPid),
    postmaster: postmaster === undefined ? undefined : readStat(postmaster),
    kafka: broker !== undefined && cmdline(broker).includes('kafka.Kafka') ? readStat(broker) : undefined,
  };
}

export interface CpuSnapshot {
  readonly taskSvc?: number;
  readonly postmaster?: number;
  /** PostgreSQL's live children: pid → (start, ticks), to tell a backend that ended from one that began. */
  readonly pgChildren: ReadonlyMap<number, ProcessTicks>;
  readonly kafka?: number;
  readonly driverUs: number;
  readonly machineBusy: number;
}

/** The same process as when the targets were found (not a new one that took its pid): its ticks, else undefined. */
const ticksOf = (stats: ReadonlyMap<number, ProcStat>, t: ProcStat | undefined, withChildren = false) => {
  const s = t && stats.get(t.pid);
  return s && s.start === t.start ? s.own + (withChildren ? s.children : 0) : undefined;
};

export function cpuSnapshot(targets: CpuTargets): CpuSnapshot {
  const stats = allStats();
  const pgChildren = new Map<number, ProcessTicks>();
  if (targets.postmaster) for (const s of stats.values()) if (s.ppid === targets.postmaster.pid) pgChildren.set(s.pid, { start: s.start, ticks: s.own });
  const cpu = process.cpuUsage();
  return {
    taskSvc: ticksOf(stats, targets.taskSvc),
    postmaster: ticksOf(stats, targets.postmaster, true),
    pgChildren,
    kafka: ticksOf(stats, targets.kafka),
    driverUs: cpu.user + cpu.system,
    machineBusy: machineCpu().busy,
  };
}

/** CPU ms per column between two snapshots (undefined: not measured, e.g. a remote PostgreSQL). */
export function cpuBetween(a: CpuSnapshot, b: CpuSnapshot): Partial<Record<CpuColumn, number>> & { readonly busy: number } {
  const diff = (x: number | undefined, y: number | undefined) => (x === undefined || y === undefined ? undefined : ticksToMs(y - x));
  let postgres = diff(a.postmaster, b.postmaster);
  if (postgres !== undefined) {
    const { live, endedBefore } = treeDelta(a.pgChildren, b.pgChildren);
    for (const ticks of live.values()) postgres += ticksToMs(ticks);
    postgres -= ticksToMs(endedBefore);
  }
  const out: Partial<Record<CpuColumn, number>> = {
    taskSvc: diff(a.taskSvc, b.taskSvc),
    postgres,
    kafka: diff(a.kafka, b.kafka),
    driver: (b.driverUs - a.driverUs) / 1000,
  };
  const busy = ticksToMs(b.machineBusy - a.machineBusy);
  const measured = Object.values(out).reduce<number>((sum, ms) => sum + (ms ?? 0), 0);
  return { ...out, other: Math.max(0, busy - measured), busy };
}

/** Runs `work` between two snapshots. */
export async function withCpu<T>(targets: CpuTargets, work: () => Promise<T>): Promise<{ result: T; cpu: ReturnType<typeof cpuBetween> }> {
  const before = cpuSnapshot(targets);
  const result = await work();
  return { result, cpu: cpuBetween(before, cpuSnapshot(targets)) };
}
