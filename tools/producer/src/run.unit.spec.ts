import { describe, expect, it } from 'vitest';
import { withTaskDeadline } from './run';
import type { ScenarioContext } from './scenarios';

const run = { waitS: 5, deadline: 1_000 } as unknown as ScenarioContext;

describe('the producer: how long a task may wait', () => {
  it('gives each task its own deadline from its own start, so a long run does not run out of time', () => {
    expect(withTaskDeadline(run, 0, 300_000).deadline).toBe(300_000);
    expect(withTaskDeadline(run, 600_000, 300_000).deadline).toBe(900_000);
    expect(withTaskDeadline(run, 600_000, 300_000).waitS).toBe(5);
  });

  it('moves a task\'s deadline as far as the chaos harness extends it, read at each check', () => {
    let extension = 0;
    const ctx = withTaskDeadline(run, 0, 1_000, () => extension);
    extension = 4_000;
    expect(ctx.deadline).toBe(5_000);
  });
});
