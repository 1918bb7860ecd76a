import { errorCode, type Call, type Reply } from './http';
import type { Actor, Cast } from './identity';

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

/** What a simulated user does in one go; the unit of the requests-per-step figure. */
export const Step = {
  create: 'create',
  claim: 'claim',
  label: 'label',
  review: 'review',
  cancel: 'cancel',
  /** Waiting for the task to be reopened as a new attempt. */
  reopened: 'reopened',
  /** Waiting for the task's final status. */
  settled: 'settled',
} as const;
export type Step = (typeof Step)[keyof typeof Step];

/** Steps taken and HTTP requests sent for them, retries and long-poll rounds included. */
export interface StepTally {
  readonly steps: number;
  readonly requests: number;
  /** Time spent in the step, from its first request to its answer (every time it was taken). */
  readonly ms: number;
}

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
  readonly byStep: Readonly<Partial<Record<Step, StepTally>>>;
}

export interface ScenarioContext {
  /** Clients for one run acting as `actor` (its bearer token on every request); `onRequest` is called for every HTTP request they send. */
  readonly services: (onRequest: () => void, actor: Actor) => Services;
  /** Who does what: the admin cancels, managers create and wait, annotators claim and label, reviewers review. */
  readonly cast: Cast;
  /** `Prefer: wait` in seconds on "not yet" answers and status waits; 0 polls with a backoff instead. */
  readonly waitS: number;
  /** Project with budget for every task; billing-fail tasks go to a second one with none. */
  readonly projectId: string;
  readonly starvedProjectId: string;
  readonly deadline: number;
  readonly random: () => number;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** A "not yet" answer the API documents: the step's event has not reached that service. */
interface NotYet {
  readonly status: number;
  readonly code: string;
}
const isNotYet = (res: Reply, notYet: readonly NotYet[]) => notYet.some((n) => n.status === res.status && n.code === errorCode(res.body));

/** The `Prefer: wait` of the next request, never past the run's deadline. */
function preferWait(ctx: ScenarioContext): { readonly headers: Record<string, string>; readonly ms: number } {
  const seconds = Math.min(ctx.waitS, Math.ceil((ctx.deadline - Date.now()) / 1000));
  return seconds > 0 ? { headers: { prefer: `wait=${seconds}` }, ms: seconds * 1000 } : { headers: {}, ms: 0 };
}

/** Whether the server held the request for the whole wait, so it needs no backoff on top. */
const waitedOut = (wait: { readonly ms: number }, sent: number) => wait.ms > 0 && Date.now() - sent >= wait.ms;

/**
 * Calls until the answer is `ok`, retrying only documented "not yet" answers. The server holds such
 * a request for up to `Prefer: wait` seconds; an answer that came sooner (no wait honoured) is
 * retried after a backoff instead, 25 ms doubling to 500 ms.
 */
async function untilAccepted<T>(ctx: ScenarioContext, what: string, call: (headers: Record<string, string>) => Promise<Reply<T>>, ok: number, notYet: readonly NotYet[]): Promise<Reply<T>> {
  for (let delay = 25; ; delay = Math.min(delay * 2, 500)) {
    const wait = notYet.length > 0 ? preferWait(ctx) : { headers: {}, ms: 0 };
    const sent = Date.now();
    const res = await call(wait.headers);
    if (res.status === ok) return res;
    if (!isNotYet(res, notYet) || Date.now() > ctx.deadline) throw new Error(`${what}: ${res.status} ${JSON.stringify(res.body)}`);
    if (!waitedOut(wait, sent)) await sleep(delay);
  }
}

interface TaskView {
  readonly status: string;
  readonly attempt: number;
}

/** Reads the task until `done`, each read a long poll on the same conditions (`query`) where the server waits. */
async function waitFor(ctx: ScenarioContext, task: Call, taskId: string, query: string, done: (t: TaskView) => boolean): Promise<TaskView> {
  for (let delay = 25; ; delay = Math.min(delay * 2, 500)) {
    const wait = preferWait(ctx);
    const sent = Date.now();
    const res = await task<TaskView>('GET', `/tasks/${taskId}?${query}`, undefined, wait.headers);
    if (res.status !== 200) throw new Error(`task ${taskId}: ${res.status} ${JSON.stringify(res.body)}`);
    if (done(res.body)) return res.body;
    if (Date.now() > ctx.deadline) throw new Error(`task ${taskId} still ${res.body.status} (attempt ${res.body.attempt}) at the deadline`);
    if (!waitedOut(wait, sent)) await sleep(delay);
  }
}

const FINAL = ['completed', 'failed', 'cancelled'];

/** The people of one run: task `i` goes to annotator `i`, its rework to annotator `i + 1`; managers and reviewers take turns. */
interface People {
  readonly manager: Services;
  readonly reviewer: Services;
  readonly admin: Services;
  readonly annotator: (n: number) => Services;
}

const pick = <T>(list: readonly T[], n: number, what: string): T => {
  const found = list[n % list.length];
  if (found === undefined) throw new Error(`the run has no ${what}`);
  return found;
};

const steps = (ctx: ScenarioContext, as: People, taskId: string) => ({
  // The claimant, the annotator and the reviewer are the callers: the bodies name no one.
  claim: (annotator: number) => untilAccepted(ctx, 'claim', () => as.annotator(annotator).task('POST', `/tasks/${taskId}/claim`, {}), 200, []),
  label: (annotator: number, attempt: number) =>
    untilAccepted(ctx, 'labels', (h) => as.annotator(annotator).label('POST', `/tasks/${taskId}/labels`, { attempt, annotations: [{ label: 'cat', confidence: 0.9 }] }, h), 201, [
      { status: 409, code: 'ASSIGNMENT_UNKNOWN' },
    ]),
  // Naming the attempt keeps an approval of the rework from landing on the rejected attempt's review.
  review: (decision: 'approve' | 'reject', attempt: number) =>
    untilAccepted(ctx, 'review', (h) => as.reviewer.qa('POST', `/reviews/${taskId}`, { decision, attempt, ...(decision === 'reject' ? { reason: 'boxes too loose' } : {}) }, h), 200, [
      { status: 404, code: 'REVIEW_NOT_FOUND' },
    ]),
  cancel: () => untilAccepted(ctx, 'cancel', () => as.admin.task('POST', `/tasks/${taskId}/cancel`, { reason: 'withdrawn by the customer' }), 200, []),
  reopened: (attempt: number) => waitFor(ctx, as.manager.task, taskId, `status=open&minAttempt=${attempt + 1}`, (t) => t.attempt > attempt && t.status === 'open'),
  settled: () => waitFor(ctx, as.manager.task, taskId, `status=${FINAL.join(',')}`, (t) => FINAL.includes(t.status)),
});

/**
 * Drives one task through its scenario over HTTP, as annotators, reviewers, managers and admins
 * would, each with a token of their own: a manager creates the task and waits for its outcome,
 * annotator `i` claims and labels it (annotator `i + 1` the rework), a reviewer decides, the
 * platform admin cancels.
 */
export async function runScenario(ctx: ScenarioContext, scenario: Scenario, i: number): Promise<TaskRun> {
  const started = Date.now();
  const project = scenario === Scenario.billingFail ? ctx.starvedProjectId : ctx.projectId;
  const byStep: Partial<Record<Step, StepTally>> = {};
  let current: Step = Step.create;
  const tally = (step: Step, add: Partial<StepTally>) => {
    const was = byStep[step] ?? { steps: 0, requests: 0, ms: 0 };
    byStep[step] = { steps: was.steps + (add.steps ?? 0), requests: was.requests + (add.requests ?? 0), ms: was.ms + (add.ms ?? 0) };
  };
  const count = () => tally(current, { requests: 1 });
  const clients = new Map<Actor, Services>();
  const as = (actor: Actor) => {
    let services = clients.get(actor);
    if (!services) clients.set(actor, (services = ctx.services(count, actor)));
    return services;
  };
  const people: People = {
    manager: as(pick(ctx.cast.managers, i, 'manager')),
    reviewer: as(pick(ctx.cast.reviewers, i, 'reviewer')),
    admin: as(ctx.cast.admin),
    annotator: (n) => as(pick(ctx.cast.annotators, n, 'annotator')),
  };
  const step = async <T>(name: Step, run: () => Promise<T>): Promise<T> => {
    current = name;
    tally(name, { steps: 1 });
    const began = performance.now();
    try {
      return await run();
    } finally {
      tally(name, { ms: performance.now() - began });
    }
  };
  let taskId: string | undefined;
  try {
    const created = await step(Step.create, () =>
      untilAccepted(ctx, 'create', () => people.manager.task<{ taskId: string }>('POST', '/tasks', { projectId: project, title: `sample ${i}`, dataUri: `s3://samples/${i}.jpg` }), 201, []),
    );
    const id = (created.body as { taskId: string }).taskId;
    taskId = id;
    const s = steps(ctx, people, id);
    const claim = (who: number) => step(Step.claim, () => s.claim(who));
    const label = (who: number, attempt: number) => step(Step.label, () => s.label(who, attempt));
    const review = (decision: 'approve' | 'reject', attempt: number) => step(Step.review, () => s.review(decision, attempt));
    if (scenario === Scenario.cancel) {
      const stage = Math.floor(ctx.random() * 4);
      if (stage >= 1) await claim(i);
      if (stage >= 2) await label(i, 1);
      if (stage >= 3) await review('approve', 1);
      await step(Step.cancel, () => s.cancel());
    } else {
      await claim(i);
      await label(i, 1);
      let attempt = 1;
      if (scenario === Scenario.reject || scenario === Scenario.qaTimeout) {
        if (scenario === Scenario.reject) await review('reject', 1);
        await step(Step.reopened, () => s.reopened(1));
        await claim(i + 1);
        await label(i + 1, 2);
        attempt = 2;
      }
      await review('approve', attempt);
    }
    const final = await step(Step.settled, () => s.settled());
    return { scenario, outcome: final.status as Outcome, ms: Date.now() - started, taskId, byStep };
  } catch (error) {
    return { scenario, outcome: 'error', ms: Date.now() - started, error: (error as Error).message, ...(taskId ? { taskId } : {}), byStep };
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
