import type { Call } from './http';

/** What a simulated task goes through; picked per task from the configured rates. */
export const Scenario = {
  happy: 'happy',
  reject: 'reject',
  billingFail: 'billing_fail',
  qaTimeout: 'qa_timeout',
  cancel: 'cancel',
} as const;
export type Scenario = (typeof Scenario)[keyof typeof Scenario];

export type Outcome = 'completed' | 'failed' | 'cancelled' | 'error';

export interface Services {
  readonly task: Call;
  readonly label: Call;
  readonly qa: Call;
  readonly billing: Call;
}

export interface TaskRun {
  readonly scenario: Scenario;
  readonly outcome: Outcome;
  readonly ms: number;
  readonly taskId?: string;
  readonly error?: string;
}

export interface ScenarioContext {
  readonly svc: Services;
  /** Project with budget for every task; billing-fail tasks go to a second one with none. */
  readonly projectId: string;
  readonly starvedProjectId: string;
  readonly annotators: number;
  readonly deadline: number;
  readonly random: () => number;
}

const admin = { 'x-labelflow-role': 'admin', 'x-labelflow-user': 'producer-admin' };
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Retries while the service answers "not yet": the step's event has not reached it yet. */
async function untilAccepted(ctx: ScenarioContext, what: string, call: () => ReturnType<Call>, ok: number, notYet: readonly number[]) {
  for (let delay = 25; ; delay = Math.min(delay * 2, 500)) {
    const res = await call();
    if (res.status === ok) return res;
    if (!notYet.includes(res.status) || Date.now() > ctx.deadline) throw new Error(`${what}: ${res.status} ${JSON.stringify(res.body)}`);
    await sleep(delay);
  }
}

async function waitFor(ctx: ScenarioContext, taskId: string, done: (t: { status: string; attempt: number }) => boolean): Promise<{ status: string; attempt: number }> {
  for (let delay = 25; ; delay = Math.min(delay * 2, 500)) {
    const res = await ctx.svc.task<{ status: string; attempt: number }>('GET', `/tasks/${taskId}`);
    if (done(res.body)) return res.body;
    if (Date.now() > ctx.deadline) throw new Error(`task ${taskId} still ${res.body.status} (attempt ${res.body.attempt}) at the deadline`);
    await sleep(delay);
  }
}

const steps = (ctx: ScenarioContext, taskId: string) => ({
  claim: (annotatorId: string) => untilAccepted(ctx, 'claim', () => ctx.svc.task('POST', `/tasks/${taskId}/claim`, { annotatorId }), 200, [409]),
  label: (annotatorId: string, attempt: number) =>
    untilAccepted(ctx, 'labels', () => ctx.svc.label('POST', `/tasks/${taskId}/labels`, { annotatorId, attempt, annotations: [{ label: 'cat', confidence: 0.9 }] }), 201, [409]),
  // Naming the attempt keeps an approval of the rework from landing on the rejected attempt's review.
  review: (decision: 'approve' | 'reject', attempt: number) =>
    untilAccepted(ctx, 'review', () => ctx.svc.qa('POST', `/reviews/${taskId}`, { reviewerId: 'reviewer-1', decision, attempt, ...(decision === 'reject' ? { reason: 'boxes too loose' } : {}) }), 200, [404]),
  cancel: () => untilAccepted(ctx, 'cancel', () => ctx.svc.task('POST', `/tasks/${taskId}/cancel`, { reason: 'withdrawn by the customer' }, admin), 200, []),
  reopened: (attempt: number) => waitFor(ctx, taskId, (t) => t.attempt > attempt && t.status === 'open'),
  settled: () => waitFor(ctx, taskId, (t) => ['completed', 'failed', 'cancelled'].includes(t.status)),
});

/** Drives one task through its scenario over HTTP, as annotators, reviewers and admins would. */
export async function runScenario(ctx: ScenarioContext, scenario: Scenario, i: number): Promise<TaskRun> {
  const started = Date.now();
  const annotator = `annotator-${i % ctx.annotators}`;
  const project = scenario === Scenario.billingFail ? ctx.starvedProjectId : ctx.projectId;
  let taskId: string | undefined;
  try {
    const created = await untilAccepted(ctx, 'create', () => ctx.svc.task<{ taskId: string }>('POST', '/tasks', { projectId: project, title: `sample ${i}`, dataUri: `s3://samples/${i}.jpg` }), 201, []);
    taskId = (created.body as { taskId: string }).taskId;
    const s = steps(ctx, taskId);
    if (scenario === Scenario.cancel) {
      const stage = Math.floor(ctx.random() * 4);
      if (stage >= 1) await s.claim(annotator);
      if (stage >= 2) await s.label(annotator, 1);
      if (stage >= 3) await s.review('approve', 1);
      await s.cancel();
    } else {
      await s.claim(annotator);
      await s.label(annotator, 1);
      let attempt = 1;
      if (scenario === Scenario.reject || scenario === Scenario.qaTimeout) {
        if (scenario === Scenario.reject) await s.review('reject', 1);
        await s.reopened(1);
        const second = `annotator-${(i + 1) % ctx.annotators}`;
        await s.claim(second);
        await s.label(second, 2);
        attempt = 2;
      }
      await s.review('approve', attempt);
    }
    const final = await s.settled();
    return { scenario, outcome: final.status as Outcome, ms: Date.now() - started, taskId };
  } catch (error) {
    return { scenario, outcome: 'error', ms: Date.now() - started, error: (error as Error).message, ...(taskId ? { taskId } : {}) };
  }
}

/** The outcome each scenario must end in; anything else is a failed run. */
export const expectedOutcome: Readonly<Record<Scenario, Outcome>> = {
  happy: 'completed',
  reject: 'completed',
  billing_fail: 'failed',
  qa_timeout: 'completed',
  cancel: 'cancelled',
};
