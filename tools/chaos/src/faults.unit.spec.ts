import { describe, expect, it } from 'vitest';
import { createLoadProgress, startFaults } from './fault-runner';
import { CUT_SHORT, inject, type FaultContext, type InjectedFault } from './faults';
import { FaultKind, type PlannedFault } from './schedule';

type Step = () => Promise<void>;

/** A private server that records its stops and starts in `log`; `stop`/`start` replace what they do. */
function fakeServer(name: string, log: string[], behave: { stop?: Step; start?: Step } = {}) {
  return {
    port: 1,
    url: `fake://${name}`,
    brokers: `fake://${name}`,
    dir: `/tmp/${name}`,
    stop: async () => {
      log.push(`${name} stop`);
      await behave.stop?.();
    },
    start: async () => {
      log.push(`${name} start`);
      await behave.start?.();
    },
    destroy: async () => void log.push(`${name} destroy`),
    keepLogs: () => undefined,
  };
}

/** A fake PrivateInfra and supervisor: nothing runs, every stop and start is recorded. */
function fakeContext(log: string[], behave: { postgres?: { stop?: Step }; kafka?: { stop?: Step }; redis?: { stop?: Step } } = {}): FaultContext {
  return {
    infra: { kafka: fakeServer('kafka', log, behave.kafka), postgres: fakeServer('postgres', log, behave.postgres), redis: fakeServer('redis', log, behave.redis) },
    supervisor: { killAndRestart: async () => true, pause: async () => undefined, recovered: async () => ({ ms: 0, ok: true }) },
    databases: ['task_svc'],
  };
}

const fault = (kind: PlannedFault['kind'], durationMs?: number): PlannedFault => ({ n: 1, kind, atTasks: 0, ...(durationMs === undefined ? {} : { durationMs }) });
const refused = () => Promise.reject(new Error('stop-instance: pg_ctl: server does not shut down'));
const until = async (ok: () => boolean) => {
  for (let i = 0; !ok(); i++) {
    if (i > 500) throw new Error('never happened');
    await new Promise((r) => setTimeout(r, 2));
  }
};

describe('a fault that restarts a server (inject)', () => {
  it('starts PostgreSQL and the Kafka broker again even when stopping them failed, and reports the failure', async () => {
    const log: string[] = [];
    await expect(inject(fault(FaultKind.pgRestart), fakeContext(log, { postgres: { stop: refused } }))).rejects.toThrow('does not shut down');
    await expect(inject(fault(FaultKind.kafkaRestart), fakeContext(log, { kafka: { stop: refused } }))).rejects.toThrow('does not shut down');
    expect(log).toEqual(['postgres stop', 'postgres start', 'kafka stop', 'kafka start']);
  });

  it('ends a Redis outage at once when the cleanup begins, and never starts Redis again after that', async () => {
    const log: string[] = [];
    const closing = new AbortController();
    const outage = inject(fault(FaultKind.redisOutage, 600_000), { ...fakeContext(log), closing: closing.signal });
    await until(() => log.includes('redis stop'));
    closing.abort();
    await expect(outage).resolves.toBe(CUT_SHORT);
    expect(log).toEqual(['redis stop']);
  });
});

describe('the fault runner, stopped by the cleanup (startFaults)', () => {
  const runner = (context: FaultContext, planned: PlannedFault[]) => {
    const faults: InjectedFault[] = [];
    const harnessErrors: string[] = [];
    const said: string[] = [];
    const progress = createLoadProgress();
    const run = startFaults({ planned, tasks: 10, recoveryMs: 1_000, progress, loadStarted: Date.now(), context, say: (l) => said.push(l), setCurrentFault: () => undefined, faults, harnessErrors });
    return { run, faults, harnessErrors, said, progress };
  };

  it('waits for the Redis outage under way to end before the servers are removed, and nothing starts after them', async () => {
    const log: string[] = [];
    const { run, faults } = runner(fakeContext(log), [fault(FaultKind.redisOutage, 600_000)]);
    await until(() => log.includes('redis stop'));
    await run.stop(5_000);
    log.push('cleanup: servers removed');
    await new Promise((r) => setTimeout(r, 20));
    expect(log).toEqual(['redis stop', 'cleanup: servers removed']);
    expect(faults.map((f) => [f.kind, f.recovered, f.note])).toEqual([[FaultKind.redisOutage, false, CUT_SHORT]]);
  });

  it('gives up on a fault whose server hangs after the bound, and still starts nothing once its stop returns', async () => {
    const log: string[] = [];
    let release = () => undefined as void;
    const hung = () => new Promise<void>((resolve) => (release = resolve));
    const { run, said } = runner(fakeContext(log, { postgres: { stop: hung } }), [fault(FaultKind.pgRestart)]);
    await until(() => log.includes('postgres stop'));
    const began = Date.now();
    await run.stop(30);
    expect(Date.now() - began).toBeLessThan(1_000);
    expect(said.at(-1)).toBe('!!! stopping the fault under way took longer than 0 s; cleaning up anyway');
    release();
    await run.done;
    expect(log).toEqual(['postgres stop']);
  });

  it('starts no fault once stopped while it waits for the load to reach the next one', async () => {
    const log: string[] = [];
    const { run, faults } = runner(fakeContext(log), [{ ...fault(FaultKind.pgRestart), atTasks: 5 }]);
    await run.stop(1_000);
    await run.done;
    expect([log, faults]).toEqual([[], []]);
  });
});
