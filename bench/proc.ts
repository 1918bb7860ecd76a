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

// ---------------------------------------------------------------- measured processes

/** A measured CPU consumer: one process, or PostgreSQL as a postmaster and every child it has or had. */
export interface Target {
  readonly name: string;
  readonly how: string;
  readonly pids: readonly number[];
  /** PostgreSQL: the postmaster(s); their children and their cutime/cstime are counted too. */
  readonly tree: boolean;
  readonly starts: ReadonlyMap<number, number>;
}

export function target(name: string, how: string, pids: readonly number[], tree = false): Target | undefined {
  const starts = new Map<number, number>();
  for (const pid of pids) {
    const s = readStat(pid);
    if (s) starts.set(pid, s.start);
  }
  return starts.size === 0 ? undefined : { name, how, pids: [...starts.keys()], tree, starts };
}

/**
 * A target's clock ticks in one pass of `allStats()`; undefined when one of its processes is gone
 * or was replaced. A tree counts its live children (new ones included) and the exited ones its
 * roots have waited for (PostgreSQL's backends that ended).
 */
export function targetTicks(t: Target, stats: ReadonlyMap<number, ProcStat>): number | undefined {
  let sum = 0;
  for (const pid of t.pids) {
    const s = stats.get(pid);
    if (!s || s.start !== t.starts.get(pid)) return undefined;
    sum += s.own;
    if (t.tree) sum += s.children;
  }
  if (t.tree) for (const s of stats.values()) if (t.pids.includes(s.ppid)) sum += s.own;
  return sum;
}

export const INFRA = ['postgres', 'kafka', 'redis'] as const;
export type Infra = (typeof INFRA)[number];
export type InfraTargets = Partial<Record<Infra, Target>>;

/**
 * The local PostgreSQL (its postmaster and children), Kafka broker and Redis server the URLs point
 * at, for benches that charge their CPU to what they measure. One not found (a remote host, another
 * user's process) is left out, with a note saying so.
 */
export function findInfra(where: { readonly pgUrl: string; readonly brokers: readonly string[]; readonly redisUrl: string }): { targets: InfraTargets; notes: string[] } {
  const targets: InfraTargets = {};
  const notes: string[] = [];
  const pgPort = localPort(where.pgUrl, 5432);
  const postmaster = pgPort === undefined ? undefined : listenerPid(pgPort);
  if (postmaster !== undefined) {
    targets.postgres = target('postgres', `postmaster listening on :${pgPort} and its children`, [postmaster], true);
  } else {
    // Fallback: every postgres process whose parent is not one (a postmaster), with its children.
    const stats = allStats();
    const roots = [...stats.values()].filter((s) => s.comm.startsWith('postgres') && !stats.get(s.ppid)?.comm.startsWith('postgres')).map((s) => s.pid);
    if (roots.length > 0) targets.postgres = target('postgres', `${roots.length} postgres root process(es) and their children`, roots, true);
  }
  if (!targets.postgres) notes.push('postgres: no local PostgreSQL process found; its CPU column is n/a');
  const kafkaPort = where.brokers.length === 1 ? localPort(where.brokers[0] ?? '', 9092) : undefined;
  const broker = kafkaPort === undefined ? undefined : listenerPid(kafkaPort);
  const kafkaPids = broker !== undefined && cmdline(broker).includes('kafka.Kafka') ? [broker] : pgrep('kafka\\.Kafka').filter((pid) => readStat(pid)?.comm === 'java');
  if (kafkaPids.length > 0) targets.kafka = target('kafka', broker !== undefined && kafkaPids[0] === broker ? `java kafka.Kafka listening on :${kafkaPort}` : 'pgrep -f kafka.Kafka (java)', kafkaPids);
  else notes.push('kafka: no local java kafka.Kafka process found; its CPU column is n/a');
  const redisPort = localPort(where.redisUrl, 6379);
  const redis = redisPort === undefined ? undefined : listenerPid(redisPort);
  if (redis !== undefined) targets.redis = target('redis', `listening on :${redisPort}`, [redis]);
  else notes.push('redis: no local Redis server found; its CPU column is n/a');
  return { targets, notes };
}

/** The infrastructure's clock ticks now, per part found. */
export function infraTicks(targets: InfraTargets, stats: ReadonlyMap<number, ProcStat> = allStats()): Partial<Record<Infra, number>> {
  const out: Partial<Record<Infra, number>> = {};
  for (const name of INFRA) {
    const t = targets[name];
    const ticks = t === undefined ? undefined : targetTicks(t, stats);
    if (ticks !== undefined) out[name] = ticks;
  }
  return out;
}

/** CPU ms per part between two `infraTicks` readings (a part missing from either is left out). */
export function infraMsBetween(a: Partial<Record<Infra, number>>, b: Partial<Record<Infra, number>>): Partial<Record<Infra, number>> {
  const out: Partial<Record<Infra, number>> = {};
  for (const name of INFRA) {
    const x = a[name];
    const y = b[name];
    if (x !== undefined && y !== undefined) out[name] = ticksToMs(y - x);
  }
  return out;
}
