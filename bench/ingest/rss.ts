// Resident memory of a process, sampled from /proc/<pid>/status while something runs.
import { readFileSync } from 'node:fs';

/** VmRSS (resident now) and VmHWM (peak since start) of `pid`, in bytes; undefined once it is gone. */
export function residentBytes(pid: number): { rss: number; hwm: number } | undefined {
  try {
    const status = readFileSync(`/proc/${pid}/status`, 'utf8');
    const kb = (field: string) => Number(new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(status)?.[1] ?? NaN) * 1024;
    return { rss: kb('VmRSS'), hwm: kb('VmHWM') };
  } catch {
    return undefined;
  }
}

export interface RssSeries {
  readonly samples: readonly { readonly atMs: number; readonly rss: number }[];
  readonly before: number;
  readonly peak: number;
  readonly after: number;
}

/** Samples `pid`'s VmRSS every `everyMs` while `work` runs; the peak is the highest sample. */
export async function sampleRss<T>(pid: number, everyMs: number, work: () => Promise<T>): Promise<{ result: T; series: RssSeries }> {
  const t0 = performance.now();
  const samples: { atMs: number; rss: number }[] = [];
  const take = () => {
    const r = residentBytes(pid);
    if (r) samples.push({ atMs: Math.round(performance.now() - t0), rss: r.rss });
  };
  take();
  const before = samples[0]?.rss ?? NaN;
  const timer = setInterval(take, everyMs);
  try {
    const result = await work();
    take();
    const after = samples.at(-1)?.rss ?? NaN;
    return { result, series: { samples, before, peak: Math.max(...samples.map((s) => s.rss)), after } };
  } finally {
    clearInterval(timer);
  }
}
