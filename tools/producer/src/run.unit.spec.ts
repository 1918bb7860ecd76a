import { describe, expect, it } from 'vitest';
import type { Call, ClientOptions } from './http';
import type { Signer } from './identity';
import { pickScenarios, runProduction, withTaskDeadline } from './run';
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

describe('the producer: a run replayed from its seed', () => {
  const signer: Signer = { actor: (identity) => ({ subject: identity.subject, authorization: async () => 'Bearer test' }) };
  const tasks = 12;
  const rates = { reject: 0, billingFail: 0, qaTimeout: 0, cancel: 0.6 };

  /**
   * A run against fake services in which task `i`'s creation answers after `createDelayMs(i)`: the
   * steps each task took before it ended (its scenario, and a cancel's stage), by task index.
   */
  async function stepsOf(createDelayMs: (i: number) => number): Promise<string[]> {
    const steps = new Map<string, string[]>();
    const fake = (_url: string, _options: ClientOptions): Call =>
      async <T>(method: 'GET' | 'POST', path: string, body?: unknown) => {
        const reply = (status: number, answer: unknown) => ({ status, body: answer as T });
        if (path === '/projects') return reply(201, { projectId: 'p' });
        if (path === '/tasks') {
          const i = Number(/^sample (\d+)$/.exec((body as { title: string }).title)?.[1]);
          await new Promise((r) => setTimeout(r, createDelayMs(i)));
          steps.set(`t${i}`, []);
          return reply(201, { taskId: `t${i}` });
        }
        const [, kind, taskId, step] = /^\/(tasks|reviews)\/(t\d+)(?:\/(\w+))?/.exec(path) ?? [];
        const taken = steps.get(taskId ?? '') ?? [];
        if (method === 'GET') return reply(200, { status: taken.includes('cancel') ? 'cancelled' : 'completed', attempt: 1 });
        taken.push(kind === 'reviews' ? 'review' : (step ?? '?'));
        return reply(step === 'labels' ? 201 : 200, {});
      };
    const summary = await runProduction({ urls: { task: 't', label: 'l', qa: 'q', billing: 'b' }, tasks, concurrency: tasks, annotators: 2, signer, price: 1, rates, duplicates: 0, timeoutMs: 10_000, waitS: 0, seed: 42, client: fake });
    expect(summary.unexpected).toEqual([]);
    expect(summary.runs.length).toBe(tasks);
    return Array.from({ length: tasks }, (_, i) => (steps.get(`t${i}`) ?? []).join(' '));
  }

  it('gives each task the same scenario and cancel stage when the workers finish their creations in the opposite order', async () => {
    const lastFirst = await stepsOf((i) => (tasks - i) * 4);
    const firstFirst = await stepsOf((i) => i * 4);
    expect(firstFirst).toEqual(lastFirst);
    // Cancel stages of every kind, and the scenarios pickScenarios says.
    expect(new Set(lastFirst.filter((s) => s.endsWith('cancel'))).size).toBeGreaterThan(2);
    expect(lastFirst.map((s) => (s.endsWith('cancel') ? 'cancel' : 'happy'))).toEqual(pickScenarios(tasks, rates, 42));
  });
});
