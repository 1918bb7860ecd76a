// What every benchmark here shares: flag parsing, percentiles, the machine's CPU, and how a bench
// ends (a missed target never fails the run; a bench that could not run at all does).
import { readFileSync } from 'node:fs';
import type { Consumer } from 'kafkajs';

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
}

/** A monotonic clock in µs, to line a consumer's window up with other processes' samples. */
export const monoUs = (): number => Number(process.hrtime.bigint() / 1000n);

/**
 * Runs `start`, takes t0 when the consumer joins its group, and resolves once `done()` says so
 * (polled every 5 ms) or throws after `timeoutMs`.
 */
export async function timeConsumer(timeoutMs: number, consumer: Consumer, start: () => Promise<void>, done: () => Promise<boolean>, what: string, endedAt?: () => number | undefined): Promise<Timed> {
  const called = performance.now();
  let joined: { at: number; cpu: NodeJS.CpuUsage; machine: ReturnType<typeof machineCpu>; mono: number } | undefined;
  const off = consumer.on(consumer.events.GROUP_JOIN, () => {
    joined ??= { at: performance.now(), cpu: process.cpuUsage(), machine: machineCpu(), mono: monoUs() };
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
  return {
    ms: end - joined.at,
    joinMs: joined.at - called,
    nodeCpuUs: cpu.user + cpu.system,
    machineBusy: (m.busy - joined.machine.busy) / Math.max(1, m.total - joined.machine.total),
    windowUs: [joined.mono, monoUs()],
  };
}
