import { expect } from 'vitest';
import { eventually, type TestStack } from '@labelflow/testing';

/** A fresh Idempotency-Key for one operation (a retry of that operation would reuse it). */
export const key = () => ({ 'idempotency-key': crypto.randomUUID() });

/** Helpers that drive the saga over HTTP as annotators and reviewers would. */
export async function createProject(stack: TestStack, budget: number, pricePerTask: number): Promise<string> {
  const res = await stack.http('billing-svc').post<{ projectId: string }>('/projects', { name: 'e2e project', budget, pricePerTask }, key());
  expect(res.status, JSON.stringify(res.body)).toBe(201);
  return res.body.projectId;
}

export async function createTask(stack: TestStack, projectId: string, title = 'is there a cat?'): Promise<string> {
  const res = await stack.http('task-svc').post<{ taskId: string }>('/tasks', { projectId, title, dataUri: 's3://bucket/img.jpg' }, key());
  expect(res.status, JSON.stringify(res.body)).toBe(201);
  return res.body.taskId;
}

export async function claim(stack: TestStack, taskId: string, annotatorId: string): Promise<void> {
  const res = await stack.http('task-svc').post(`/tasks/${taskId}/claim`, { annotatorId });
  expect(res.status, JSON.stringify(res.body)).toBe(200);
}

/**
 * Sends a command that may be answered "not yet" (its precondition travels through Kafka) with
 * `Prefer: wait`, so the service answers once it arrives. Only that documented answer is retried;
 * anything else that is not `ok`, a 5xx above all, fails the test at once.
 */
async function untilAccepted(send: () => Promise<{ status: number; body: unknown }>, ok: number, notYet: { status: number; code: string }): Promise<void> {
  const deadline = Date.now() + 60_000;
  for (;;) {
    const res = await send();
    if (res.status === ok) return;
    const code = (res.body as { error?: { code?: string } } | undefined)?.error?.code;
    if (res.status !== notYet.status || code !== notYet.code || Date.now() > deadline) throw new Error(`answered ${res.status}: ${JSON.stringify(res.body)}`);
  }
}

const wait = { prefer: 'wait=20' };

/** label-svc learns the assignment from Kafka; until it has, it answers 409 ASSIGNMENT_UNKNOWN. */
export async function submitLabels(
  stack: TestStack,
  taskId: string,
  annotatorId: string,
  body: Record<string, unknown> = { annotatorId, annotations: [{ label: 'cat', confidence: 0.9 }] },
  headers: Record<string, string> = {},
): Promise<void> {
  await untilAccepted(() => stack.http('label-svc').post(`/tasks/${taskId}/labels`, body, { ...wait, ...headers }), 201, { status: 409, code: 'ASSIGNMENT_UNKNOWN' });
}

/**
 * qa-svc opens the review when LabelSubmitted arrives; until then it answers 404 REVIEW_NOT_FOUND.
 * A rework's review names its `attempt`: without it, the decided review of the attempt before
 * answers 409 until the new labels arrive, and that is not a "not yet".
 */
export async function review(stack: TestStack, taskId: string, decision: 'approve' | 'reject', reason?: string, attempt?: number): Promise<void> {
  await untilAccepted(
    () => stack.http('qa-svc').post(`/reviews/${taskId}`, { reviewerId: 'reviewer-1', decision, ...(reason ? { reason } : {}), ...(attempt ? { attempt } : {}) }, wait),
    200,
    { status: 404, code: 'REVIEW_NOT_FOUND' },
  );
}

export async function taskStatus(stack: TestStack, taskId: string): Promise<string> {
  const res = await stack.http('task-svc').get<{ status: string }>(`/tasks/${taskId}`);
  return res.body.status;
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
