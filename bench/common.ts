// What every benchmark here shares: flag parsing, percentiles, the machine's CPU, and how a bench
// ends (a missed target never fails the run; a bench that could not run at all does).
import { readFileSync } from 'node:fs';
import type { Consumer } from 'kafkajs';
import os from 'node:os';
import { INFRA, infraMsBetween, infraTicks, type Infra, type InfraTargets } from './proc';

export function positiveInt(name: string, raw: string | undefined): number {
  const n = Number(raw);
  if (!Number.isInteger(n) || n < 1) throw new Error(`--${name} must be a positive integer, got ${raw}`);
  return n;
}

/** Nearest-rank percentile of an ascending array; NaN when empty. */
export function percentile(sorted: ArrayLike<number>, p: number): number {
  if (sorted.length === 0) return NaN;
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))] ?? NaN;
}

export const median = (xs: readonly number[]): number => percentile([...xs].sort((a, b) => a - b), 50);

export const fmtRate = (n: number): string => (Number.isFinite(n) ? Math.round(n).toLocaleString('en-US') : 'n/a');

export const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * The whole machine's CPU jiffies from /proc/stat: busy (user, nice, system, irq, softirq) and
 * total (busy + idle + iowait). Steal is the hypervisor's, not this machine's work.
 */
export function machineCpu(): { busy: number; total: number } {
  try {
    const line = (readFileSync('/proc/stat', 'utf8').split('\n')[0] ?? '').trim().split(/\s+/).slice(1).map(Number);
    const at = (i: number) => line[i] ?? 0;
    const busy = at(0) + at(1) + at(2) + at(5) + at(6);
    return { busy, total: busy + at(3) + at(4) };
  } catch {
    return { busy: NaN, total: NaN };
  }
}

/** A URL fit to print: its password masked. */
export function redactUrl(url: string): string {
  try {
    const u = new URL(url);
    if (u.password) u.password = '***';
    return u.toString();
  } catch {
    return url;
  }
}

/** Runs a bench's main: its exit code, or 1 when it could not run at all. */
export function runBench(name: string, main: () => Promise<number>): void {
  main().then(
    (code) => process.exit(code),
    (error: unknown) => {
      console.error(`${name} bench failed:`, error);
      process.exit(1);
    },
  );
}

/** Machine-wide CPU (all cores, every process: Kafka, PostgreSQL and Redis share the box). */
export interface Timed {
  /** From the group join (first assignment) to the last message accounted for. */
  readonly ms: number;
  /** From calling start/connect to the group join (connect, join, sync), not in `ms`. */
  readonly joinMs: number;
  /** This process's CPU (user+system) over `ms`, µs. */
  readonly nodeCpuUs: number;
  /** Share of all cores busy over `ms`, 0..1 (every process on the machine). */
  readonly machineBusy: number;
  readonly windowUs: readonly [number, number];
  /** CPU ms over `ms` of the local PostgreSQL (every backend), Kafka broker and Redis, where found. */
  readonly infraMs: Partial<Record<Infra, number>>;
}

/** A monotonic clock in µs, to line a consumer's window up with other processes' samples. */
export const monoUs = (): number => Number(process.hrtime.bigint() / 1000n);

/**
 * Runs `start`, takes t0 when the consumer joins its group, and resolves once `done()` says so
 * (polled every 5 ms) or throws after `timeoutMs`.
 */
export async function timeConsumer(
  timeoutMs: number,
  consumer: Consumer,
  start: () => Promise<void>,
  done: () => Promise<boolean>,
  what: string,
  endedAt?: () => number | undefined,
  infra: InfraTargets = {},
): Promise<Timed> {
  const called = performance.now();
  let joined: { at: number; cpu: NodeJS.CpuUsage; machine: ReturnType<typeof machineCpu>; mono: number; infra: ReturnType<typeof infraTicks> } | undefined;
  const off = consumer.on(consumer.events.GROUP_JOIN, () => {
    if (joined) return;
    // /proc first: reading it takes milliseconds, which must not count in the window.
    const before = infraTicks(infra);
    joined = { infra: before, machine: machineCpu(), at: performance.now(), cpu: process.cpuUsage(), mono: monoUs() };
  });
  try {
    await start();
    const deadline = Date.now() + timeoutMs;
    while (!(await done())) {
      if (Date.now() > deadline) throw new Error(`${what}: not every message was accounted for within ${timeoutMs / 1000} s`);
      await sleep(5);
    }
  } finally {
    off();
  }
  // The raw consumer notes the exact moment it saw the last message; the pipeline is polled.
  const end = endedAt?.() ?? performance.now();
  if (!joined) throw new Error(`${what}: finished without a group join event`);
  const cpu = process.cpuUsage(joined.cpu);
  const m = machineCpu();
  const infraMs = infraMsBetween(joined.infra, infraTicks(infra));
  return {
    ms: end - joined.at,
    joinMs: joined.at - called,
    nodeCpuUs: cpu.user + cpu.system,
    machineBusy: (m.busy - joined.machine.busy) / Math.max(1, m.total - joined.machine.total),
    windowUs: [joined.mono, monoUs()],
    infraMs,
  };
}

/** The infrastructure's CPU per item over a window, e.g. "postgres 21.3 + kafka 2.0 + redis 1.9 µs/event". */
export function fmtInfra(ms: Partial<Record<Infra, number>>, items: number, unit: string): string {
  const parts = INFRA.filter((k) => ms[k] !== undefined).map((k) => `${k} ${(((ms[k] ?? 0) * 1000) / items).toFixed(1)}`);
  return parts.length === 0 ? '' : `${parts.join(' + ')} µs/${unit}`;
}
/** Per part, the median of its CPU ms over several windows (a part missing from all is left out). */
export function medianInfra(xs: readonly Partial<Record<Infra, number>>[]): Partial<Record<Infra, number>> {
  const out: Partial<Record<Infra, number>> = {};
  for (const k of INFRA) {
    const vals = xs.map((x) => x[k]).filter((v): v is number => v !== undefined);
    if (vals.length > 0) out[k] = median(vals);
  }
  return out;
}
/** The infrastructure's CPU µs per item over a window, every part found summed; NaN when none was. */
export function infraUsPer(ms: Partial<Record<Infra, number>>, items: number): number {
  const found = INFRA.filter((k) => ms[k] !== undefined);
  return found.length === 0 ? NaN : (found.reduce((sum, k) => sum + (ms[k] ?? 0), 0) * 1000) / items;
}


/**
 * What the machine's cores allow a consumer, from the CPU it and the infrastructure spent per
 * event (an upper bound: it assumes every core busy with nothing else). `atRawNodeCost` is the
 * bound for a service that cost no more Node CPU than the raw consumer: a target above it is out of
 * reach on this machine whatever the service's code does.
 */
export interface CpuFloor {
  readonly cores: number;
  readonly nodeUsPerEvent: number;
  readonly infraUsPerEvent: number;
  readonly infraMsPerRun: Partial<Record<Infra, number>>;
  readonly rawNodeUsPerEvent: number;
  /** events/s the cores allow at the contender's measured CPU per event (Node + infrastructure). */
  readonly atMeasuredCost: number;
  /** events/s the cores allow at the infrastructure's measured cost plus the raw consumer's Node CPU. */
  readonly atRawNodeCost: number;
}

export function cpuFloor(contender: readonly Timed[], raw: readonly Timed[], eventsPerRun: number): CpuFloor {
  const cores = os.cpus().length;
  const nodeUsPerEvent = median(contender.map((t) => t.nodeCpuUs / eventsPerRun));
  const infraUsPerEvent = median(contender.map((t) => infraUsPer(t.infraMs, eventsPerRun)));
  const rawNodeUsPerEvent = median(raw.map((t) => t.nodeCpuUs / eventsPerRun));
  return {
    cores,
    nodeUsPerEvent,
    infraUsPerEvent,
    infraMsPerRun: medianInfra(contender.map((t) => t.infraMs)),
    rawNodeUsPerEvent,
    atMeasuredCost: (cores * 1e6) / (infraUsPerEvent + nodeUsPerEvent),
    atRawNodeCost: (cores * 1e6) / (infraUsPerEvent + rawNodeUsPerEvent),
  };
}

export function describeFloor(f: CpuFloor, rawEventsPerSec: number, eventsPerRun: number): string {
  const x = (n: number) => (Number.isFinite(n) ? `${n.toFixed(2)}x` : 'n/a');
  return (
    `CPU FLOOR per event: node ${f.nodeUsPerEvent.toFixed(1)} µs + infrastructure ${f.infraUsPerEvent.toFixed(1)} µs (${fmtInfra(f.infraMsPerRun, eventsPerRun, 'event')}). ` +
    `${f.cores} cores allow at most ${fmtRate(f.atMeasuredCost)} events/s at that cost (${x(f.atMeasuredCost / rawEventsPerSec)} raw); ` +
    `a service no dearer than the raw consumer (${f.rawNodeUsPerEvent.toFixed(1)} µs) would still be held to ${fmtRate(f.atRawNodeCost)} events/s (${x(f.atRawNodeCost / rawEventsPerSec)} raw).`
  );
}
