import { createWriteStream, mkdirSync, type WriteStream } from 'node:fs';
import { join } from 'node:path';
import type { ServiceName } from '@labelflow/contracts';
import { metricValue, type ServiceProcess, type TestStack } from '@labelflow/testing';
import { sleep } from './harness';
import { serviceOrder } from './schedule';

/** Something the services did that they must not: exit by themselves, not come back, not recover. */
export interface Finding {
  readonly at: string;
  readonly service?: ServiceName;
  readonly what: string;
  /** The fault being injected (or recovered from) at the time, if any. */
  readonly during?: string;
  /** The service log that shows it. */
  readonly log?: string;
}


async function within<T>(ms: number, work: Promise<T>): Promise<T | 'timeout'> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<'timeout'>((resolve) => (timer = setTimeout(() => resolve('timeout'), ms)));
  try {
    return await Promise.race([work, timeout]);
  } finally {
    clearTimeout(timer);
  }
}

export interface SupervisorOptions {
  readonly stack: TestStack;
  /** Extra env per service, given again on every restart (TestStack.start does not remember it). */
  readonly overrides: Readonly<Partial<Record<ServiceName, Record<string, string>>>>;
  readonly logDir: string;
  readonly recoveryMs: number;
  readonly say: (line: string) => void;
  /** The fault under way, for findings. */
  readonly currentFault: () => string | undefined;
  /** Once aborted (Ctrl-C reaches the services too), exits are the shutdown, not findings. */
  readonly signal?: AbortSignal;
  /** A platform admin's `Authorization` header: /metrics (read for the consumer's state) is for admins only. */
  readonly authorization: () => Promise<string>;
}

/**
 * Keeps the four service processes of a stack: restarts the ones the run kills, and notices the
 * ones that die without being killed (a finding: reported loudly, restarted, and the run goes on).
 * Every process's output is kept in `<logDir>/<service>.<generation>.log`.
 */
export class Supervisor {
  readonly findings: Finding[] = [];
  private readonly down = new Set<ServiceName>();
  private readonly expected = new WeakSet<ServiceProcess>();
  private readonly paused = new Set<ServiceProcess>();
  private readonly generation: Record<string, number> = {};
  private readonly logs = new Set<WriteStream>();
  private stopping = false;
  /** Restarts still under way (after a kill or an unplanned exit): stopAll waits for them. */
  private readonly restarting = new Set<Promise<unknown>>();

  constructor(private readonly o: SupervisorOptions) {
    mkdirSync(o.logDir, { recursive: true });
    for (const name of serviceOrder) this.watch(o.stack.processes[name]);
  }

  /** The URL the proxy forwards to, or undefined while the service is down. */
  target(name: ServiceName): string | undefined {
    return this.down.has(name) ? undefined : this.o.stack.processes[name].url;
  }

  finding(f: Omit<Finding, 'at' | 'during'>): void {
    const during = this.o.currentFault();
    const full: Finding = { at: new Date().toISOString(), ...(during ? { during } : {}), ...f };
    this.findings.push(full);
    this.o.say(`!!! FINDING: ${f.service ? `${f.service}: ` : ''}${f.what}${during ? ` (during: ${during})` : ''}${f.log ? ` — log ${f.log}` : ''}`);
  }

  private logFile(name: ServiceName): string {
    return join(this.o.logDir, `${name}.${this.generation[name] ?? 0}.log`);
  }

  private watch(proc: ServiceProcess): void {
    const name = proc.name;
    this.generation[name] = (this.generation[name] ?? 0) + 1;
    const file = this.logFile(name);
    const out = createWriteStream(file);
    this.logs.add(out);
    // What it logged until it listened, then everything as it comes (no await in between: nothing is lost or doubled).
    out.write(proc.logs());
    const append = (chunk: Buffer) => out.write(chunk);
    proc.child.stdout?.on('data', append);
    proc.child.stderr?.on('data', append);
    void proc.exited.then(({ code, signal }) => {
      out.end(`\n[chaos] process exited: code ${code}, signal ${signal}\n`);
      this.logs.delete(out);
      if (this.stopping || this.o.signal?.aborted || this.expected.has(proc) || this.o.stack.processes[name] !== proc) return;
      this.finding({ service: name, what: `exited by itself (code ${code}, signal ${signal}); restarting it`, log: file });
      void this.restart(name);
    });
  }

  private get closing(): boolean {
    return this.stopping || this.o.signal?.aborted === true;
  }

  /** Starts the service again, retrying (another fault may be under way) until `recoveryMs`. */
  restart(name: ServiceName): Promise<boolean> {
    const restart = this.restartLoop(name);
    this.restarting.add(restart);
    void restart.finally(() => this.restarting.delete(restart));
    return restart;
  }

  private async restartLoop(name: ServiceName): Promise<boolean> {
    this.down.add(name);
    const until = Date.now() + this.o.recoveryMs;
    for (let attempt = 1; !this.closing; attempt++) {
      try {
        const proc = await this.o.stack.start(name, this.o.overrides[name] ?? {});
        this.watch(proc);
        // Started while the run was being torn down: stopAll may already have passed it by.
        if (this.closing) {
          proc.child.kill('SIGKILL');
          return false;
        }
        this.down.delete(name);
        return true;
      } catch (error) {
        if (this.closing) return false;
        if (Date.now() > until) {
          this.finding({ service: name, what: `could not be restarted within ${this.o.recoveryMs / 1000} s: ${(error as Error).message.split('\n')[0]}` });
          return false;
        }
        this.o.say(`    ${name} did not start (attempt ${attempt}): ${(error as Error).message.split('\n')[0]}; trying again`);
        await sleep(2_000);
      }
    }
    return false;
  }

  /** SIGKILL (planned: not a finding), then start it again. */
  async killAndRestart(name: ServiceName): Promise<boolean> {
    const proc = this.o.stack.processes[name];
    this.expected.add(proc);
    this.down.add(name);
    await proc.kill();
    return this.restart(name);
  }

  /** SIGSTOP for `ms` (less once `until` aborts), then SIGCONT. */
  async pause(name: ServiceName, ms: number, until?: AbortSignal): Promise<void> {
    const proc = this.o.stack.processes[name];
    proc.child.kill('SIGSTOP');
    this.paused.add(proc);
    try {
      await sleep(ms, until);
    } finally {
      proc.child.kill('SIGCONT');
      this.paused.delete(proc);
    }
  }

  /** Whether the service answers /readyz 200 and its consumer runs; the reason when not. */
  async notReady(name: ServiceName): Promise<string | undefined> {
    if (this.down.has(name)) return 'down';
    const url = this.o.stack.processes[name].url;
    try {
      const ready = await fetch(`${url}/readyz`, { signal: AbortSignal.timeout(3_000) });
      if (ready.status !== 200) return `/readyz ${ready.status} ${(await ready.text()).slice(0, 300)}`;
      const scraped = await fetch(`${url}/metrics`, { headers: { authorization: await this.o.authorization() }, signal: AbortSignal.timeout(3_000) });
      const metrics = await scraped.text();
      if (scraped.status !== 200) return `/metrics ${scraped.status} ${metrics.slice(0, 300)}`;
      if (metricValue(metrics, 'consumer_running') !== 1) return 'its consumer is not running';
      return undefined;
    } catch (error) {
      return `no answer: ${(error as Error).message}`;
    }
  }

  /**
   * Waits until every service is ready again; resolves with how long that took. A service that is
   * not ready after `recoveryMs` is a finding (it did not recover on its own).
   */
  async recovered(until?: AbortSignal): Promise<{ readonly ms: number; readonly ok: boolean }> {
    const started = Date.now();
    let reasons: string[] = [];
    while (Date.now() - started < this.o.recoveryMs) {
      // The run is being torn down: nothing is waited for any more, and that is no finding.
      if (until?.aborted) return { ms: Date.now() - started, ok: false };
      await Promise.all([...this.restarting]);
      reasons = (await Promise.all(serviceOrder.map(async (n) => [n, await this.notReady(n)] as const))).filter(([, r]) => r !== undefined).map(([n, r]) => `${n}: ${r}`);
      if (reasons.length === 0) return { ms: Date.now() - started, ok: true };
      await sleep(250);
    }
    this.finding({ what: `not ready ${this.o.recoveryMs / 1000} s after the fault: ${reasons.join('; ')}` });
    return { ms: Date.now() - started, ok: false };
  }

  /** Stops every process (SIGCONT first for a paused one; SIGKILL after 20 s). */
  async stopAll(): Promise<void> {
    this.stopping = true;
    // A restart under way ends within its service's start timeout; whatever it started is killed.
    await within(90_000, Promise.allSettled([...this.restarting]));
    const procs = serviceOrder.map((n) => this.o.stack.processes[n]);
    for (const p of [...this.paused, ...procs]) p.child.kill('SIGCONT');
    await Promise.all(
      procs.map(async (p) => {
        if ((await within(20_000, p.stop())) === 'timeout') await within(5_000, p.kill());
      }),
    );
    await Promise.all([...this.logs].map((out) => new Promise<void>((resolve) => out.end(() => resolve()))));
  }
}
