import { describe, expect, it } from 'vitest';
import { chaosDefaults, SESSION_TIMEOUT_MS, validateOptions, type ChaosOptions } from './options';
import { faultKinds, formatSchedule, planFaults, serviceOrder, type ScheduleInput } from './schedule';

const input = (over: Partial<ScheduleInput> = {}): ScheduleInput => ({ tasks: 10_000, seed: 42, killsPerService: 3, pgDrops: 3, redisOutageMs: 30_000, pauseMs: 9_000, window: [0.05, 0.8], ...over });

describe('planFaults', () => {
  it('is the same schedule for the same seed, and another one for another seed', () => {
    expect(planFaults(input())).toEqual(planFaults(input()));
    expect(formatSchedule(planFaults(input()), 10_000, 42)).toBe(formatSchedule(planFaults(input()), 10_000, 42));
    expect(planFaults(input({ seed: 7 }))).not.toEqual(planFaults(input()));
  });

  it('holds every fault of the run: kills per service, connection drops, and one of each other kind', () => {
    const faults = planFaults(input());
    for (const service of serviceOrder) expect(faults.filter((f) => f.kind === 'kill' && f.service === service), service).toHaveLength(3);
    expect(faults.filter((f) => f.kind === 'pg-drop')).toHaveLength(3);
    for (const kind of ['pg-restart', 'kafka-restart', 'redis-outage', 'pause'] as const) expect(faults.filter((f) => f.kind === kind), kind).toHaveLength(1);
    expect(new Set(faults.map((f) => f.kind))).toEqual(new Set(faultKinds));
    expect(faults.find((f) => f.kind === 'redis-outage')?.durationMs).toBe(30_000);
    expect(faults.find((f) => f.kind === 'pause')?.durationMs).toBe(9_000);
  });

  it('spreads them in order over the window of finished tasks', () => {
    const faults = planFaults(input());
    expect(faults.map((f) => f.n)).toEqual(faults.map((_, i) => i + 1));
    for (let i = 1; i < faults.length; i++) expect(faults[i]!.atTasks).toBeGreaterThan(faults[i - 1]!.atTasks);
    expect(faults[0]!.atTasks).toBeGreaterThanOrEqual(500);
    expect(faults.at(-1)!.atTasks).toBeLessThanOrEqual(8_000);
  });

  it('still gives every fault a trigger of at least one task on a tiny run', () => {
    const faults = planFaults(input({ tasks: 3, killsPerService: 1, pgDrops: 1 }));
    expect(faults).toHaveLength(9);
    for (const f of faults) expect(f.atTasks).toBeGreaterThanOrEqual(1);
  });
});

describe('chaosDefaults', () => {
  it('gives 10,000 tasks three kills per service, a 30 s Redis outage and a pause longer than the session timeout', () => {
    const d = chaosDefaults(10_000);
    expect(d.killsPerService).toBe(3);
    expect(d.pgDrops).toBe(3);
    expect(d.redisOutageMs).toBe(30_000);
    expect(d.pauseMs).toBeGreaterThan(SESSION_TIMEOUT_MS);
  });

  it('scales kills and the Redis outage down for short runs, never below one kill each and 5 s', () => {
    expect(chaosDefaults(1_000).killsPerService).toBe(1);
    expect(chaosDefaults(300).killsPerService).toBe(1);
    expect(chaosDefaults(1_000).redisOutageMs).toBe(6_000);
    expect(chaosDefaults(300).redisOutageMs).toBe(5_000);
  });

  it('refuses a pause that does not outlast the session timeout, and rates above 1', () => {
    const ok: ChaosOptions = { ...chaosDefaults(100), tasks: 100, duplicates: 0.3, seed: 1, logDir: '/tmp/x' };
    expect(validateOptions(ok)).toEqual([]);
    expect(validateOptions({ ...ok, pauseMs: SESSION_TIMEOUT_MS }).join()).toContain('--pause-s');
    expect(validateOptions({ ...ok, rates: { reject: 0.5, billingFail: 0.5, qaTimeout: 0.1, cancel: 0 } }).join()).toContain('add up to more than 1');
  });
});
