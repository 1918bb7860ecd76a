import { describe, expect, it } from 'vitest';
import { withTaskDeadline } from './run';
import type { ScenarioContext } from './scenarios';

const run = { waitS: 5, deadline: 1_000 } as unknown as ScenarioContext;

describe('the producer: how long a task may wait', () => {
  it('gives each task its own deadline from its own start, so a long run does not run out of time', () => {
    expect(withTaskDeadline(run, { startMs: 0, timeoutMs: 300_000 }).deadline).toBe(300_000);
    expect(withTaskDeadline(run, { startMs: 600_000, timeoutMs: 300_000 }).deadline).toBe(900_000);
    expect(withTaskDeadline(run, { startMs: 600_000, timeoutMs: 300_000 }).waitS).toBe(5);
  });

  it('moves a task\'s deadline by the extension granted since it started, read at each check, not by faults before it began', () => {
    let extension = 10_000;
    const ctx = withTaskDeadline(run, { startMs: 0, timeoutMs: 1_000, extensionMs: () => extension });
    expect(ctx.deadline).toBe(1_000);
    extension = 14_000;
    expect(ctx.deadline).toBe(5_000);
  });

  it('never lets a task wait past the run\'s own bound when the caller sets one', () => {
    let runDeadline = 2_000;
    const ctx = withTaskDeadline(run, { startMs: 1_500, timeoutMs: 1_000, runDeadline: () => runDeadline });
    expect(ctx.deadline).toBe(2_000);
    runDeadline = 9_000;
    expect(ctx.deadline).toBe(2_500);
  });
});
