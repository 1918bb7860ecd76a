import { expect } from 'vitest';
import { as, eventually, GiveUp, type HttpResult, type TestIdentity, type TestStack } from '@labelflow/testing';

/** A fresh Idempotency-Key for one operation (a retry of that operation would reuse it). */
export const key = () => ({ 'idempotency-key': crypto.randomUUID() });

/** The reviewer the helpers decide reviews as: never one of the annotators the tests name. */
export const REVIEWER = 'reviewer-1';

/**
 * Helpers that drive the saga over HTTP as the people in it would: a platform admin creates the
 * projects and the tasks, annotators (a role in the task's project) claim and label, a reviewer of
 * the project decides. Each acts with a bearer token of its own.
 */
export async function createProject(stack: TestStack, budget: number, pricePerTask: number, currency?: string): Promise<string> {
  const res = await stack.http('billing-svc').post<{ projectId: string }>('/projects', { name: 'e2e project', budget, pricePerTask, ...(currency ? { currency } : {}) }, key());
  expect(res.status, JSON.stringify(res.body)).toBe(201);
  return res.body.projectId;
}

/** The project of each task a helper has met, per stack (a task never moves to another project). */
const projects = new WeakMap<TestStack, Map<string, string>>();
const projectsOf = (stack: TestStack) => {
  let known = projects.get(stack);
  if (!known) projects.set(stack, (known = new Map()));
  return known;
};

export async function createTask(stack: TestStack, projectId: string, title = 'is there a cat?'): Promise<string> {
  const res = await stack.http('task-svc').post<{ taskId: string; projectId: string }>('/tasks', { projectId, title, dataUri: 's3://bucket/img.jpg' }, key());
  expect(res.status, JSON.stringify(res.body)).toBe(201);
  projectsOf(stack).set(res.body.taskId, res.body.projectId);
  return res.body.taskId;
}

/** The project a task belongs to, read as a platform admin from task-svc. */
export async function projectOf(stack: TestStack, taskId: string): Promise<string> {
  const known = projectsOf(stack);
  const cached = known.get(taskId);
  if (cached) return cached;
  const res = await stack.http('task-svc').get<{ projectId: string }>(`/tasks/${taskId}`);
  expect(res.status, JSON.stringify(res.body)).toBe(200);
  known.set(taskId, res.body.projectId);
  return res.body.projectId;
}

/** `user` as an annotator of the task's project. */
export const annotatorOf = async (stack: TestStack, taskId: string, user: string): Promise<TestIdentity> => as.annotator(user, await projectOf(stack, taskId));
/** `user` (by default the helpers' reviewer) as a reviewer of the task's project. */
export const reviewerOf = async (stack: TestStack, taskId: string, user = REVIEWER): Promise<TestIdentity> => as.reviewer(user, await projectOf(stack, taskId));

/** The annotator claims the task as herself: the claimant is the token's subject, the body empty. */
export async function claim(stack: TestStack, taskId: string, annotatorId: string): Promise<void> {
  const res = await stack.http('task-svc', await annotatorOf(stack, taskId, annotatorId)).post(`/tasks/${taskId}/claim`, {});
  expect(res.status, JSON.stringify(res.body)).toBe(200);
}

/**
 * Sends a command that may be answered "not yet" (its precondition travels through Kafka), with
 * `Prefer: wait` so the service answers once it arrives, and hands back the first other answer.
 * Only that documented answer is sent again, for at most a minute.
 */
export async function pastNotYet<T>(send: () => Promise<HttpResult<T>>, notYet: { status: number; code: string }): Promise<HttpResult<T>> {
  const deadline = Date.now() + 60_000;
  for (;;) {
    const res = await send();
    const code = (res.body as { error?: { code?: string } } | undefined)?.error?.code;
    if (res.status !== notYet.status || code !== notYet.code) return res;
    if (Date.now() > deadline) throw new Error(`still answered ${res.status}: ${JSON.stringify(res.body)} after a minute`);
  }
}

/** As `pastNotYet`, and anything that is not `ok`, a 5xx above all, fails the test at once. */
export async function untilAccepted(send: () => Promise<HttpResult>, ok: number, notYet: { status: number; code: string }): Promise<void> {
  const res = await pastNotYet(send, notYet);
  if (res.status !== ok) throw new Error(`answered ${res.status}: ${JSON.stringify(res.body)}`);
}

const wait = { prefer: 'wait=20' };

/**
 * The annotator submits labels as herself. label-svc learns the assignment from Kafka; until it
 * has, it answers 409 ASSIGNMENT_UNKNOWN.
 */
export async function submitLabels(
  stack: TestStack,
  taskId: string,
  annotatorId: string,
  body: Record<string, unknown> = { annotations: [{ label: 'cat', confidence: 0.9 }] },
  headers: Record<string, string> = {},
): Promise<void> {
  const labels = stack.http('label-svc', await annotatorOf(stack, taskId, annotatorId));
  await untilAccepted(() => labels.post(`/tasks/${taskId}/labels`, body, { ...wait, ...headers }), 201, { status: 409, code: 'ASSIGNMENT_UNKNOWN' });
}

/**
 * The reviewer decides. qa-svc opens the review when LabelSubmitted arrives; until then it answers
 * 404 REVIEW_NOT_FOUND.
 * A rework's review names its `attempt`: without it, the decided review of the attempt before
 * answers 409 until the new labels arrive, and that is not a "not yet".
 */
export async function review(stack: TestStack, taskId: string, decision: 'approve' | 'reject', reason?: string, attempt?: number): Promise<void> {
  const qa = stack.http('qa-svc', await reviewerOf(stack, taskId));
  await untilAccepted(
    () => qa.post(`/reviews/${taskId}`, { decision, ...(reason ? { reason } : {}), ...(attempt ? { attempt } : {}) }, wait),
    200,
    { status: 404, code: 'REVIEW_NOT_FOUND' },
  );
}

/** The task's status; any answer but 200 fails the test at once, also inside `eventually`. */
export async function taskStatus(stack: TestStack, taskId: string): Promise<string> {
  const res = await stack.http('task-svc').get<{ status: string }>(`/tasks/${taskId}`);
  if (res.status !== 200) throw new GiveUp(`GET /tasks/${taskId} answered ${res.status}: ${JSON.stringify(res.body)}`);
  return res.body.status;
}

/** label-svc's view of a task once it has heard of it: 404 TASK_NOT_FOUND is its documented "not yet", retried by `eventually`; any other answer but 200 fails the test at once. */
export async function labelsView<T = { assignment: { attempt: number; annotatorId?: string | null } | null }>(stack: TestStack, taskId: string, identity?: TestIdentity): Promise<T> {
  const res = await stack.http('label-svc', identity).get<T>(`/tasks/${taskId}/labels`);
  const code = (res.body as { error?: { code?: string } } | undefined)?.error?.code;
  if (res.status === 404 && code === 'TASK_NOT_FOUND') throw new Error(`label-svc has not heard of task ${taskId} yet`);
  if (res.status !== 200) throw new GiveUp(`GET /tasks/${taskId}/labels answered ${res.status}: ${JSON.stringify(res.body)}`);
  return res.body;
}

export async function waitForStatus(stack: TestStack, taskId: string, status: string, timeoutMs = 60_000): Promise<void> {
  await eventually(async () => expect(await taskStatus(stack, taskId)).toBe(status), { timeoutMs });
}

/** Claims, labels and approves each task concurrently, spreading them over `annotators` annotators. */
export function approveAll(stack: TestStack, taskIds: readonly string[], annotators: number): Promise<void[]> {
  return Promise.all(
    taskIds.map(async (taskId, i) => {
      const annotator = `annotator-${i % annotators}`;
      await claim(stack, taskId, annotator);
      await submitLabels(stack, taskId, annotator);
      await review(stack, taskId, 'approve');
    }),
  );
}
