// CPU of the processes an import keeps busy, per window (the endpoint's run, the ceiling's): task-svc,
// PostgreSQL (its postmaster, live children, and children that ended), the Kafka broker, this bench
// process, and whatever else ran on the machine. On a shared or throttled 2-core machine the rows/s
// of both contenders swing by ±15 % from run to run; the CPU each spends per 1,000 lines moves far
// less, and says which process an optimisation saved.
import { machineCpu } from '../common';
import { allStats, findInfra, infraMsBetween, infraTicks, target, targetTicks, ticksToMs, type Infra, type InfraTargets, type Target } from '../proc';

export const CpuColumn = { taskSvc: 'task-svc', postgres: 'PostgreSQL', kafka: 'Kafka', driver: 'bench process', other: 'other' } as const;
export type CpuColumn = keyof typeof CpuColumn;

export interface CpuTargets {
  readonly taskSvc?: Target;
  readonly infra?: InfraTargets;
}

/** The processes to account: task-svc by its pid, PostgreSQL and Kafka by who listens on their local ports (absent when remote). */
export function cpuTargets(taskSvcPid: number | undefined, pgUrl: string, brokers: readonly string[]): CpuTargets {
  const { postgres, kafka } = findInfra({ pgUrl, brokers, redisUrl: '' }).targets;
  return {
    taskSvc: taskSvcPid === undefined ? undefined : target('task-svc', `pid ${taskSvcPid}`, [taskSvcPid]),
    infra: { ...(postgres ? { postgres } : {}), ...(kafka ? { kafka } : {}) },
  };
}

/** The columns found, by name. */
export const cpuColumnsFound = (t: CpuTargets): CpuColumn[] => [...(t.taskSvc ? (['taskSvc'] as const) : []), ...(t.infra?.postgres ? (['postgres'] as const) : []), ...(t.infra?.kafka ? (['kafka'] as const) : [])];

export interface CpuSnapshot {
  readonly taskSvc?: number;
  readonly infra: Partial<Record<Infra, number>>;
  readonly driverUs: number;
  readonly machineBusy: number;
}

export function cpuSnapshot(targets: CpuTargets): CpuSnapshot {
  const stats = allStats();
  const cpu = process.cpuUsage();
  return {
    taskSvc: targets.taskSvc && targetTicks(targets.taskSvc, stats),
    infra: infraTicks(targets.infra ?? {}, stats),
    driverUs: cpu.user + cpu.system,
    machineBusy: machineCpu().busy,
  };
}

/** CPU ms per column between two snapshots (undefined: not measured, e.g. a remote PostgreSQL). */
export function cpuBetween(a: CpuSnapshot, b: CpuSnapshot): Partial<Record<CpuColumn, number>> & { readonly busy: number } {
  const infra = infraMsBetween(a.infra, b.infra);
  const out: Partial<Record<CpuColumn, number>> = {
    taskSvc: a.taskSvc === undefined || b.taskSvc === undefined ? undefined : ticksToMs(b.taskSvc - a.taskSvc),
    postgres: infra.postgres,
    kafka: infra.kafka,
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
