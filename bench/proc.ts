// /proc readings shared by the benches that account CPU per process (bench:saga, bench:ingest):
// a process's CPU clock ticks, PostgreSQL's postmaster and children, the process listening on a
// local port. Linux only; every reader answers undefined (or empty) where /proc says nothing.
import { execFileSync } from 'node:child_process';
import { readdirSync, readFileSync, readlinkSync } from 'node:fs';
import os from 'node:os';

export const CLK_TCK = (() => {
  try {
    return Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim()) || 100;
  } catch {
    return 100;
  }
})();
export const ticksToMs = (ticks: number) => (ticks * 1000) / CLK_TCK;

export interface ProcStat {
  readonly pid: number;
  readonly comm: string;
  readonly ppid: number;
  /** utime + stime, clock ticks. */
  readonly own: number;
  /** cutime + cstime: children this process has waited for (PostgreSQL's exited backends). */
  readonly children: number;
  readonly start: number;
}

export function parseStat(pid: number, text: string): ProcStat | undefined {
  const open = text.indexOf('(');
  const close = text.lastIndexOf(')');
  if (open < 0 || close < 0) return undefined;
  const f = text.slice(close + 2).split(' ');
  // f[0] is field 3 (state): utime is field 14 → f[11], stime f[12], cutime f[13], cstime f[14], starttime f[19].
  return { pid, comm: text.slice(open + 1, close), ppid: Number(f[1]), own: Number(f[11]) + Number(f[12]), children: Number(f[13]) + Number(f[14]), start: Number(f[19]) };
}

export function readStat(pid: number): ProcStat | undefined {
  try {
    return parseStat(pid, readFileSync(`/proc/${pid}/stat`, 'utf8'));
  } catch {
    return undefined;
  }
}

/** Every process on the machine, one pass over /proc. */
export function allStats(): Map<number, ProcStat> {
  const out = new Map<number, ProcStat>();
  let entries: string[] = [];
  try {
    entries = readdirSync('/proc');
  } catch {
    return out;
  }
  for (const e of entries) {
    if (!/^\d+$/.test(e)) continue;
    const s = readStat(Number(e));
    if (s) out.set(s.pid, s);
  }
  return out;
}

export const cmdline = (pid: number) => {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, 'utf8').replace(/\0/g, ' ').trim();
  } catch {
    return '';
  }
};

export function pgrep(pattern: string): number[] {
  try {
    return execFileSync('pgrep', ['-f', pattern], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] })
      .split('\n')
      .map(Number)
      .filter((pid) => pid > 0 && pid !== process.pid);
  } catch {
    return [];
  }
}

/** The process with a listening TCP socket on `port` (/proc/net/tcp{,6}, then the owner of that socket inode). */
export function listenerPid(port: number): number | undefined {
  const inodes = new Set<string>();
  for (const file of ['/proc/net/tcp', '/proc/net/tcp6']) {
    let text = '';
    try {
      text = readFileSync(file, 'utf8');
    } catch {
      continue;
    }
    for (const line of text.split('\n').slice(1)) {
      const f = line.trim().split(/\s+/);
      const local = f[1];
      if (!local || f[3] !== '0A') continue; // 0A = LISTEN
      if (parseInt(local.split(':').pop() ?? '', 16) === port && f[9]) inodes.add(f[9]);
    }
  }
  if (inodes.size === 0) return undefined;
  for (const e of readdirSync('/proc')) {
    if (!/^\d+$/.test(e)) continue;
    let fds: string[] = [];
    try {
      fds = readdirSync(`/proc/${e}/fd`);
    } catch {
      continue;
    }
    for (const fd of fds) {
      try {
        const m = /^socket:\[(\d+)\]$/.exec(readlinkSync(`/proc/${e}/fd/${fd}`));
        if (m?.[1] && inodes.has(m[1])) return Number(e);
      } catch {
        // the fd closed meanwhile
      }
    }
  }
  return undefined;
}

export const isLocalHost = (host: string) => ['127.0.0.1', 'localhost', '::1', '[::1]', '0.0.0.0', os.hostname()].includes(host);
export function localPort(url: string, defaultPort: number): number | undefined {
  try {
    const u = new URL(url.includes('://') ? url : `tcp://${url}`);
    return isLocalHost(u.hostname) ? Number(u.port || defaultPort) : undefined;
  } catch {
    return undefined;
  }
}

/** A process's CPU at one reading, with its start time to tell it from a later process given the same pid. */
export interface ProcessTicks {
  readonly start: number;
  readonly ticks: number;
}

/**
 * CPU clock ticks of a process tree's members between two readings (pid → start, own ticks):
 * `live` per member alive at the second (a new one counted whole), and `endedBefore`, what the
 * members gone by the second had used at the first. A child that ended is in its parent's
 * cutime with its whole life, so `endedBefore` is what to take off that.
 */
export function treeDelta(a: ReadonlyMap<number, ProcessTicks>, b: ReadonlyMap<number, ProcessTicks>): { live: Map<number, number>; endedBefore: number } {
  const live = new Map<number, number>();
  for (const [pid, now] of b) {
    const was = a.get(pid);
    live.set(pid, now.ticks - (was && was.start === now.start ? was.ticks : 0));
  }
  let endedBefore = 0;
  for (const [pid, was] of a) if (b.get(pid)?.start !== was.start) endedBefore += was.ticks;
  return { live, endedBefore };
}
