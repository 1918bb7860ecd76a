import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { ADMIN, as, httpClient, startStack, type HttpResult, type TestIdentity, type TestStack } from '@labelflow/testing';
import { claim, createProject, createTask, review, REVIEWER, submitLabels, waitForStatus } from './saga';

type ErrorBody = { error: { code: string; message: string } };
const code = (res: HttpResult) => (res.body as Partial<ErrorBody> | undefined)?.error?.code;

/**
 * What each caller is shown, and how much it may ask (security.e2e.spec.ts covers who may do what):
 * who did the work appears only to those people and to those who may see people, lists hold only
 * the caller's projects a page at a time, and each subject has a rate limit.
 *
 * Project A: olga owns it, mia manages it, reviewer-1 reviews, ann-a1 and ann-a2 annotate.
 * Project B: bea annotates there. Neither of them has any part in A.
 */
describe('what callers are shown and how often they may ask', () => {
  let stack: TestStack;
  let projectA: string;
  let projectB: string;
  /** A task of A that ann-a1 labelled, reviewer-1 approved and billing paid for. */
  let done: string;
  const people = {
    olga: () => as.owner('olga', projectA),
    mia: () => as.manager('mia', projectA),
    reviewer: () => as.reviewer(REVIEWER, projectA),
    annA1: () => as.annotator('ann-a1', projectA),
    annA2: () => as.annotator('ann-a2', projectA),
    bea: () => as.annotator('bea', projectB),
  };

  beforeAll(async () => {
    stack = await startStack(inject('infra'));
    projectA = await createProject(stack, 10_000, 100);
    projectB = await createProject(stack, 10_000, 100);
    done = await createTask(stack, projectA, 'done');
    await claim(stack, done, 'ann-a1');
    await submitLabels(stack, done, 'ann-a1');
    await review(stack, done, 'approve');
    await waitForStatus(stack, done, 'completed');
  });
  afterAll(async () => stack?.stop());

  it('shows who did the work only to those people and to those who may see people', async () => {
    type TaskView = { assignee?: string | null };
    const taskView = async (who: TestIdentity) => (await stack.http('task-svc', who).get<TaskView>(`/tasks/${done}`)).body;
    expect(await taskView(people.annA1())).toMatchObject({ assignee: 'ann-a1' });
    expect(await taskView(people.mia())).toMatchObject({ assignee: 'ann-a1' });
    expect(await taskView(ADMIN)).toMatchObject({ assignee: 'ann-a1' });
    expect(await taskView(people.annA2())).not.toHaveProperty('assignee');
    expect(await taskView(people.reviewer())).not.toHaveProperty('assignee');

    type LabelsView = { assignment: { annotatorId?: string }; labels: { annotatorId?: string }[] };
    const labelsView = async (who: TestIdentity) => (await stack.http('label-svc', who).get<LabelsView>(`/tasks/${done}/labels`)).body;
    for (const who of [people.annA1(), people.olga()]) {
      const view = await labelsView(who);
      expect([view.assignment.annotatorId, view.labels.map((l) => l.annotatorId)], who.user).toEqual(['ann-a1', ['ann-a1']]);
    }
    const hidden = await labelsView(people.reviewer());
    expect(hidden.assignment).not.toHaveProperty('annotatorId');
    expect(hidden.labels).toHaveLength(1);
    expect(hidden.labels[0]).not.toHaveProperty('annotatorId');

    type ReviewView = { annotatorId?: string; reviewerId?: string; history: unknown[] };
    const reviewView = async (who: TestIdentity) => (await stack.http('qa-svc', who).get<ReviewView>(`/reviews/${done}`)).body;
    const byAnnotator = await reviewView(people.annA1());
    expect(byAnnotator.annotatorId).toBe('ann-a1');
    expect(byAnnotator).not.toHaveProperty('reviewerId');
    const byReviewer = await reviewView(people.reviewer());
    expect(byReviewer.reviewerId).toBe(REVIEWER);
    expect(byReviewer).not.toHaveProperty('annotatorId');
    const byOther = await reviewView(people.annA2());
    expect(byOther).not.toHaveProperty('annotatorId');
    expect(byOther).not.toHaveProperty('reviewerId');
    expect(await reviewView(people.mia())).toMatchObject({ annotatorId: 'ann-a1', reviewerId: REVIEWER });
  });


  it("lists only the caller's projects, a page at a time", async () => {
    const inB = [];
    for (const title of ['b1', 'b2', 'b3']) inB.push(await createTask(stack, projectB, title));
    const bea = stack.http('task-svc', people.bea());
    type Page = { tasks: { taskId: string; projectId: string }[]; nextCursor: string | null };
    const first = await bea.get<Page>('/tasks?limit=2');
    expect(first.status, JSON.stringify(first.body)).toBe(200);
    expect(first.body.tasks).toHaveLength(2);
    expect(first.body.nextCursor).toEqual(expect.any(String));
    const second = await bea.get<Page>(`/tasks?limit=2&cursor=${encodeURIComponent(first.body.nextCursor!)}`);
    expect(second.body.nextCursor).toBeNull();
    expect([...first.body.tasks, ...second.body.tasks].map((t) => t.taskId)).toEqual(inB);

    const everything = await stack.http('task-svc').get<Page>('/tasks?limit=1000');
    expect(everything.body.tasks.map((t) => t.projectId)).toEqual(expect.arrayContaining([projectA, projectB]));
    const ofA = await stack.http('task-svc', people.annA2()).get<Page>('/tasks?limit=1000');
    expect(new Set(ofA.body.tasks.map((t) => t.projectId))).toEqual(new Set([projectA]));
    expect(ofA.body.tasks.map((t) => t.taskId)).toContain(done);

    type Reviews = { reviews: { taskId: string; projectId: string }[]; nextCursor: string | null };
    const reviewsOfA = await stack.http('qa-svc', people.reviewer()).get<Reviews>('/reviews?limit=1000');
    expect(reviewsOfA.body.reviews.map((r) => r.taskId)).toContain(done);
    expect(new Set(reviewsOfA.body.reviews.map((r) => r.projectId))).toEqual(new Set([projectA]));
    expect((await stack.http('qa-svc', people.bea()).get<Reviews>('/reviews')).body).toEqual({ reviews: [], nextCursor: null });
  });


  it('answers 429 RATE_LIMITED with Retry-After once a subject has spent its burst, and goes on serving others', async () => {
    // One more task-svc instance, with a limit a test can reach; the stack's own are far above it.
    // A token every 100 s: however slowly a loaded machine answers the five requests, none refills.
    const limited = await stack.startExtra('task-svc', { RATE_LIMIT_PER_SECOND: '0.01', RATE_LIMIT_BURST: '3' });
    const hasty = httpClient(limited.url, as.annotator('hasty', projectA));
    const answers: HttpResult[] = [];
    const first = Date.now();
    for (let i = 0; i < 5; i++) answers.push(await hasty.get('/tasks?limit=1'));
    const elapsedS = Math.ceil((Date.now() - first) / 1000);
    expect(answers.map((a) => a.status)).toEqual([200, 200, 200, 429, 429]);
    expect(code(answers[3]!)).toBe('RATE_LIMITED');
    // The next token is due 100 s after the first request took one, less the time the requests took since.
    expect(Number(answers[3]!.headers.get('retry-after'))).toBeGreaterThanOrEqual(100 - elapsedS - 1);
    expect(Number(answers[3]!.headers.get('retry-after'))).toBeLessThanOrEqual(100);
    expect((await hasty.as(as.annotator('patient', projectA)).get('/tasks?limit=1')).status).toBe(200);
    expect((await hasty.as(null).get('/healthz')).status).toBe(200);
  });
});
