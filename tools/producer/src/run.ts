import { startDuplicator } from './duplicator';
import { client, type Call, type ClientOptions } from './http';
import type { KafkaTarget } from './kafka-target';
import { adminOf, castFor, DEFAULT_MANAGERS, DEFAULT_REVIEWERS, devSigner, type Actor, type Signer } from './identity';
import { taskRandom } from './random';
import { expectedOutcome, runScenario, Scenario, type ScenarioContext, type Services, type Step, type StepTally, type TaskRun } from './scenarios';

export interface ProductionOptions {
  readonly urls: { readonly task: string; readonly label: string; readonly qa: string; readonly billing: string };
  readonly tasks: number;
  readonly concurrency: number;
  /** Annotators (`annotator-0` …), each with a token of its own. */
  readonly annotators: number;
  /** Reviewers (`reviewer-0` …), never annotators. Default 3. */
  readonly reviewers?: number;
  /** Project managers (`manager-0` …) who create the tasks and wait for their outcome. Default 4. */
  readonly managers?: number;
  /** Signs the simulated users' tokens. Default: the local development key (`devSigner()`), which `npm start` and the test stacks trust. */
  readonly signer?: Signer;
  readonly price: number;
  /** Fractions of tasks per failure scenario; the rest take the happy path. */
  readonly rates: { readonly reject: number; readonly billingFail: number; readonly qaTimeout: number; readonly cancel: number };
  /** Fraction of Kafka messages delivered a second time (needs `kafka`). */
  readonly duplicates: number;
  readonly kafka?: KafkaTarget;
  /** How long one task may wait on its steps, from its start. */
  readonly timeoutMs: number;
  /**
   * A bound on the whole load too, from its start: no task waits past it. The chaos harness and
   * the tests set it to what their own time limit leaves, so a saga stuck late in the load is
   * reported as unexpected before that limit ends the run without a report. The CLI sets none.
   */
  readonly runTimeoutMs?: number;
  /**
   * How far the deadline has moved, read each time a scenario checks it. The chaos harness passes
   * how long its injected faults have lasted so far: a saga that waited out an outage it was made
   * to meet is not stuck, and a fixed deadline would count it so on a host slow to recover.
   */
  readonly deadlineExtensionMs?: () => number;
  /** `Prefer: wait` in seconds for "not yet" answers and status waits (default 10); 0 polls instead. */
  readonly waitS?: number;
  /** Each task's scenario and choices within it (a cancel's stage) follow from this and its index alone. */
  readonly seed: number;
  readonly onProgress?: (done: number, total: number) => void;
  /** Sends the requests: the HTTP client by default (a test gives a fake). */
  readonly client?: (baseUrl: string, options: ClientOptions) => Call;
}

export interface ProductionSummary {
  readonly tasks: number;
  readonly byScenario: Readonly<Record<string, number>>;
  readonly byOutcome: Readonly<Record<string, number>>;
  readonly unexpected: readonly TaskRun[];
  readonly latencyMs: { readonly p50: number; readonly p99: number };
  readonly durationMs: number;
  readonly duplicated: number;
  readonly duplicatedByType: Readonly<Record<string, number>>;
  /** HTTP requests the scenarios sent (retries and long-poll rounds included) per step they took, overall and by step. */
  readonly requestsPerStep: number;
  readonly byStep: Readonly<Partial<Record<Step, StepTally>>>;
  /** 429 RATE_LIMITED answers the scenarios got (each waited out and sent again; included in the requests). */
  readonly rateLimited: number;
  /** 503 answers the scenarios got and sent again (a dependency of a service was away): 0 in a run without faults. */
  readonly unavailable: number;
  /** Who took part: the subjects of the admin, managers, annotators and reviewers. */
  readonly cast: { readonly admin: string; readonly managers: number; readonly annotators: number; readonly reviewers: number };
  readonly projectId: string;
  readonly runs: readonly TaskRun[];
}

/** Where the tokens come from, for an error message when the services refuse them. */
export const signingHint = 'by default the local development key, $LABELFLOW_SIGNING_KEY_FILE or .local/auth/dev-signing-key.json, which `npm start` configures the services with';

const percentile = (sorted: readonly number[], p: number) => sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))] ?? 0;

/** A task's scenario from its generator's first draw: the rates cut [0, 1) in turn, the rest is happy. */
export function pickScenario(random: () => number, rates: ProductionOptions['rates']): Scenario {
  const cut = [
    [rates.reject, Scenario.reject],
    [rates.billingFail, Scenario.billingFail],
    [rates.qaTimeout, Scenario.qaTimeout],
    [rates.cancel, Scenario.cancel],
  ] as const;
  let x = random();
  for (const [rate, scenario] of cut) {
    if (x < rate) return scenario;
    x -= rate;
  }
  return Scenario.happy;
}

/** The scenarios of tasks 0 … n-1 as `runProduction` picks them: deterministic per seed, so a failing mix can be replayed exactly. */
export function pickScenarios(n: number, rates: ProductionOptions['rates'], seed: number): Scenario[] {
  return Array.from({ length: n }, (_, i) => pickScenario(taskRandom(seed, i), rates));
}

/** Drives `tasks` tasks through their scenarios with `concurrency` workers and summarises. */
export async function runProduction(o: ProductionOptions): Promise<ProductionSummary> {
  const waitS = o.waitS ?? 10;
  const managers = o.managers ?? DEFAULT_MANAGERS;
  const reviewers = o.reviewers ?? DEFAULT_REVIEWERS;
  if (!(o.annotators >= 1 && managers >= 1 && reviewers >= 1)) throw new Error('a run needs at least one annotator, one manager and one reviewer');
  let rateLimited = 0;
  let unavailable = 0;
  // A long poll lasts up to waitS: the request timeout must outlast it, or each one is cut and retried.
  const services = (actor: Actor, onRequest?: () => void): Services => {
    const options = { timeoutMs: waitS * 1000 + 10_000, authorization: actor.authorization, onRequest, onRateLimited: () => rateLimited++, onUnavailable: () => unavailable++ };
    const call = o.client ?? client;
    return { task: call(o.urls.task, options), label: call(o.urls.label, options), qa: call(o.urls.qa, options), billing: call(o.urls.billing, options) };
  };
  const signer = o.signer ?? (await devSigner());
  const admin = adminOf(signer);
  const create = async (budget: number) => {
    const res = await services(admin).billing<{ projectId: string }>('POST', '/projects', { name: `produce ${new Date().toISOString()}`, budget, pricePerTask: o.price });
    if (res.status === 401) throw new Error(`cannot create a project: the services refuse the producer's token (${JSON.stringify(res.body)}); they must trust the key it signs with (${signingHint})`);
    if (res.status !== 201) throw new Error(`cannot create a project: ${res.status} ${JSON.stringify(res.body)}`);
    return res.body.projectId;
  };
  const projectId = await create(o.price * o.tasks);
  const starvedProjectId = await create(0);
  const cast = castFor(signer, admin, [projectId, starvedProjectId], { annotators: o.annotators, managers, reviewers });
  const duplicator =
    o.duplicates > 0 && o.kafka
      ? await startDuplicator({ brokers: o.kafka.brokers, ...(o.kafka.security ? { security: o.kafka.security } : {}), topics: ['task', 'label', 'qa', 'billing'].map((t) => `${o.kafka?.topicPrefix}.${t}-events`), rate: o.duplicates, seed: o.seed })
      : undefined;
  const deadlineAt = Date.now() + (o.runTimeoutMs ?? o.timeoutMs);
  // The run's own deadline; each task runs under one of its own (below), never past this one when
  // the caller bounds the run.
  const ctx: ScenarioContext = {
    services: (onRequest, actor) => services(actor, onRequest),
    cast,
    waitS,
    projectId,
    starvedProjectId,
    get deadline() {
      return deadlineAt + (o.deadlineExtensionMs?.() ?? 0);
    },
    // Replaced per task (below): a generator shared by the workers would be drawn in the order
    // the tasks happen to reach their choices, which differs from run to run.
    random: () => {
      throw new Error('a task draws from its own generator (taskRandom)');
    },
  };
  const started = Date.now();
  const runs: TaskRun[] = [];
  let next = 0;
  try {
    await Promise.all(
      Array.from({ length: Math.min(o.concurrency, o.tasks) }, async () => {
        while (next < o.tasks) {
          const i = next++;
          // The first draw picks the scenario, the later ones the choices within it.
          const random = taskRandom(o.seed, i);
          const scenario = pickScenario(random, o.rates);
          const task = withTaskDeadline({ ...ctx, random }, { startMs: Date.now(), timeoutMs: o.timeoutMs, ...(o.deadlineExtensionMs ? { extensionMs: o.deadlineExtensionMs } : {}), ...(o.runTimeoutMs === undefined ? {} : { runDeadline: () => ctx.deadline }) });
          runs.push(await runScenario(task, scenario, i));
          o.onProgress?.(runs.length, o.tasks);
        }
      }),
    );
  } finally {
    await duplicator?.stop();
  }
  const count = (f: (r: TaskRun) => string) => runs.reduce<Record<string, number>>((acc, r) => ({ ...acc, [f(r)]: (acc[f(r)] ?? 0) + 1 }), {});
  const latencies = runs.filter((r) => r.outcome !== 'error').map((r) => r.ms).sort((a, b) => a - b);
  const byStep: Partial<Record<Step, StepTally>> = {};
  for (const run of runs) {
    for (const [step, t] of Object.entries(run.byStep) as [Step, StepTally][]) {
      const was = byStep[step] ?? { steps: 0, requests: 0, ms: 0 };
      byStep[step] = { steps: was.steps + t.steps, requests: was.requests + t.requests, ms: was.ms + t.ms };
    }
  }
  const totals = Object.values(byStep).reduce((acc, t) => ({ steps: acc.steps + t.steps, requests: acc.requests + t.requests }), { steps: 0, requests: 0 });
  return {
    tasks: o.tasks,
    byScenario: count((r) => r.scenario),
    byOutcome: count((r) => r.outcome),
    unexpected: runs.filter((r) => r.outcome !== expectedOutcome[r.scenario]),
    latencyMs: { p50: percentile(latencies, 50), p99: percentile(latencies, 99) },
    durationMs: Date.now() - started,
    duplicated: duplicator?.duplicated() ?? 0,
    duplicatedByType: duplicator?.duplicatedByType() ?? {},
    requestsPerStep: totals.steps === 0 ? 0 : totals.requests / totals.steps,
    byStep,
    rateLimited,
    unavailable,
    cast: { admin: admin.subject, managers, annotators: o.annotators, reviewers },
    projectId,
    runs,
  };
}

/**
 * The context of one task, with a deadline of its own: `timeoutMs` from its start, moved on by the
 * extension granted since it started (faults before it began were not its to wait out), and never
 * past `runDeadline` when the run is bounded. A run of thousands of tasks outlasts any one task's
 * wait, and a deadline of the whole run alone would turn every task after it into an error.
 */
export function withTaskDeadline(
  ctx: ScenarioContext,
  task: { readonly startMs: number; readonly timeoutMs: number; readonly extensionMs?: () => number; readonly runDeadline?: () => number },
): ScenarioContext {
  const extension = task.extensionMs ?? (() => 0);
  const grantedBefore = extension();
  return {
    ...ctx,
    get deadline() {
      const own = task.startMs + task.timeoutMs + (extension() - grantedBefore);
      return task.runDeadline ? Math.min(own, task.runDeadline()) : own;
    },
  };
}
