import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { as, eventually, queryRows, startStack, tokenFor, type TestStack } from '@labelflow/testing';
import { expectAuditClean } from './audit';
import { claim, createProject, createTask, key, pastNotYet, review, submitLabels, waitForStatus } from './saga';

describe('the annotation saga on the happy path', () => {
  let stack: TestStack;
  beforeAll(async () => {
    stack = await startStack(inject('infra'));
  });
  afterAll(async () => stack?.stop());

  it('completes every task, settles every service and bills each task exactly once', async () => {
    const price = 250;
    const budget = 10_000;
    const projectId = await createProject(stack, budget, price);
    const tasks = await Promise.all(Array.from({ length: 6 }, (_, i) => createTask(stack, projectId, `image ${i}`)));

    await Promise.all(
      tasks.map(async (taskId, i) => {
        const annotator = `annotator-${i % 2}`;
        await claim(stack, taskId, annotator);
        await submitLabels(stack, taskId, annotator);
        await review(stack, taskId, 'approve');
      }),
    );
    for (const taskId of tasks) await waitForStatus(stack, taskId, 'completed');

    // label-svc accepts labels when its own consumer reads QaPassed or BillingCompleted: a completed
    // task in task-svc says nothing about how far label-svc has read.
    await eventually(async () => {
      const labels = await queryRows<{ status: string }>(stack.databases['label-svc'], 'SELECT status FROM labels WHERE task_id = ANY($1::text[])', [tasks]);
      expect(labels.map((l) => l.status)).toEqual(tasks.map(() => 'accepted'));
    });
    const reviews = await queryRows<{ status: string }>(stack.databases['qa-svc'], 'SELECT status FROM reviews WHERE task_id = ANY($1::text[])', [tasks]);
    expect(reviews.map((r) => r.status)).toEqual(tasks.map(() => 'passed'));

    const ledger = await queryRows<{ task_id: string; kind: string; amount: string }>(
      stack.databases['billing-svc'],
      `SELECT task_id, kind, amount FROM ledger WHERE task_id IS NOT NULL ORDER BY task_id, kind`,
    );
    for (const taskId of tasks) {
      expect(ledger.filter((e) => e.task_id === taskId).map((e) => [e.kind, Number(e.amount)])).toEqual([['credit', price], ['debit', price]]);
    }
    const project = await stack.http('billing-svc').get<{ balance: number }>(`/projects/${projectId}`);
    expect(project.body.balance).toBe(budget - price * tasks.length);
    const payouts = await Promise.all(['annotator-0', 'annotator-1'].map((a) => stack.http('billing-svc').get<{ balances: Record<string, number> }>(`/annotators/${a}/payouts`)));
    expect(payouts.map((p) => p.body.balances)).toEqual([{ USD: price * 3 }, { USD: price * 3 }]);

    const completed = await queryRows<{ n: string }>(stack.databases['task-svc'], `SELECT count(*) AS n FROM outbox WHERE event_type = 'TaskCompleted'`);
    expect(Number(completed[0]!.n)).toBe(tasks.length);
    await eventually(async () => {
      const unpublished = await queryRows<{ n: string }>(stack.databases['task-svc'], 'SELECT count(*) AS n FROM outbox_pending');
      expect(Number(unpublished[0]!.n)).toBe(0);
    });
    await expectAuditClean(stack, inject('infra').kafkaBrokers);
  });

  it('pays an annotator who works for a EUR and a USD project one payout in each currency, never their sum', async () => {
    const annotator = 'annotator-two-currencies';
    const [eur, usd] = [await createProject(stack, 10_000, 300, 'EUR'), await createProject(stack, 10_000, 200, 'USD')];
    const tasks = [await createTask(stack, eur), await createTask(stack, usd), await createTask(stack, usd)];
    for (const taskId of tasks) {
      await claim(stack, taskId, annotator);
      await submitLabels(stack, taskId, annotator);
      await review(stack, taskId, 'approve');
      await waitForStatus(stack, taskId, 'completed');
    }

    type Payouts = { balances: Record<string, number>; entries: { projectId: string; amount: number; currency: string }[] };
    const own = await stack.http('billing-svc', as.annotator(annotator, eur)).get<Payouts>(`/annotators/${annotator}/payouts`);
    expect(own.status).toBe(200);
    expect(own.body.balances).toEqual({ EUR: 300, USD: 400 });
    expect(own.body.entries.map((e) => [e.currency, e.amount]).sort()).toEqual([['EUR', 300], ['USD', 200], ['USD', 200]]);
    await stack.quiesce();
    await expectAuditClean(stack, inject('infra').kafkaBrokers);
  });

  it('answers bad requests with clear errors and refuses the wrong annotator', async () => {
    const task = stack.http('task-svc');
    const malformed = await task.post<{ error: { code: string } }>('/tasks', '{"projectId": ');
    expect(malformed.status).toBe(400);
    expect(malformed.body.error.code).toBe('INVALID_JSON');
    const invalid = await task.post<{ error: { code: string; details: { path: string }[] } }>('/tasks', { projectId: 'not-a-uuid', title: '' });
    expect(invalid.status).toBe(400);
    expect(invalid.body.error.details.map((d) => d.path)).toEqual(expect.arrayContaining(['body.projectId', 'body.title', 'body.dataUri']));
    expect((await task.get('/tasks/not-a-uuid')).status).toBe(400);

    const projectId = await createProject(stack, 1_000, 100);
    const taskId = await createTask(stack, projectId);
    await claim(stack, taskId, 'alice');
    const mallory = as.annotator('mallory', projectId);
    const stolen = await task.as(mallory).post<{ error: { code: string } }>(`/tasks/${taskId}/claim`, { annotatorId: 'mallory' });
    expect(stolen.status).toBe(409);
    expect(stolen.body.error.code).toBe('TASK_NOT_CLAIMABLE');

    const labels = stack.http('label-svc', mallory);
    // Not yet (409 ASSIGNMENT_UNKNOWN) until label-svc has the claim; then refused for good.
    const notHers = await pastNotYet(() => labels.post<{ error: { code: string } }>(`/tasks/${taskId}/labels`, { annotatorId: 'mallory', annotations: [{ label: 'dog' }] }, { prefer: 'wait=20' }), { status: 409, code: 'ASSIGNMENT_UNKNOWN' });
    expect([notHers.status, notHers.body.error.code]).toEqual([403, 'NOT_ASSIGNEE']);
    const empty = await labels.as(as.annotator('alice', projectId)).post(`/tasks/${taskId}/labels`, { annotatorId: 'alice', annotations: [] });
    expect(empty.status).toBe(400);
  });

  it('refuses what PostgreSQL cannot store, misspelt fields and bad URLs with 400, a missing or malformed token with 401, and takes a project id in any case', async () => {
    const task = stack.http('task-svc');
    const projectId = await createProject(stack, 1_000, 100);
    type Failure = { error: { code: string; message: string } };

    for (const title of ['a\u0000b', 'half a pair \ud800']) {
      const res = await task.post<Failure>('/tasks', { projectId, title, dataUri: 's3://bucket/img.jpg' }, key());
      expect([res.status, res.body.error.code], JSON.stringify(res.body)).toEqual([400, 'VALIDATION_FAILED']);
    }
    const nameless = await stack.http('billing-svc').post<Failure>('/projects', { name: 'nul\u0000', budget: 1, pricePerTask: 1 }, key());
    expect([nameless.status, nameless.body.error.code]).toEqual([400, 'VALIDATION_FAILED']);

    // The admin's user name travels in TaskCancelled; a token whose subject the contracts refuse,
    // like a missing or malformed token, never gets that far.
    const taskId = await createTask(stack, projectId);
    const longUser = await task.post<Failure>(`/tasks/${taskId}/cancel`, { reason: 'x' }, { authorization: `Bearer ${await tokenFor(as.admin('a'.repeat(129)))}` });
    expect([longUser.status, longUser.body.error.code]).toEqual([401, 'TOKEN_INVALID']);
    expect(longUser.headers.get('www-authenticate')).toMatch(/^Bearer realm="labelflow", error="invalid_token"/);
    const notBearer = await task.post<Failure>(`/tasks/${taskId}/cancel`, { reason: 'x' }, { authorization: 'Basic b3BzOnNlY3JldA==' });
    expect([notBearer.status, notBearer.body.error.code]).toEqual([401, 'TOKEN_INVALID']);
    const forged = await task.post<Failure>(`/tasks/${taskId}/cancel`, { reason: 'x' }, { authorization: `Bearer ${(await tokenFor(as.admin())).replace(/\.[^.]+$/, '.AAAA')}` });
    expect([forged.status, forged.body.error.code]).toEqual([401, 'TOKEN_INVALID']);
    const anonymous = await task.as(null).post<Failure>(`/tasks/${taskId}/cancel`, { reason: 'x' });
    expect([anonymous.status, anonymous.body.error.code, anonymous.headers.get('www-authenticate')]).toEqual([401, 'TOKEN_MISSING', 'Bearer realm="labelflow"']);
    expect((await task.get<{ status: string }>(`/tasks/${taskId}`)).body.status).toBe('open');

    await claim(stack, taskId, 'alice');
    const typo = await stack.http('label-svc', as.annotator('alice', projectId)).post<Failure>(`/tasks/${taskId}/labels`, { annotatorId: 'alice', annotations: [{ label: 'cat', confidnce: 0.9 }] }, key());
    expect([typo.status, typo.body.error.code]).toEqual([400, 'VALIDATION_FAILED']);
    const retryBody = await stack.http('billing-svc').post<Failure>(`/tasks/${taskId}/billing/retry`, { foo: 1 });
    expect([retryBody.status, retryBody.body.error.code]).toEqual([400, 'VALIDATION_FAILED']);

    const badUrl = await task.get<Failure>('/tasks/%E0%A4%A');
    expect([badUrl.status, badUrl.body.error?.code]).toEqual([400, 'BAD_REQUEST']);

    // One project, two spellings: one counter, distinct numbers, ids stored in lower case.
    const upper = projectId.toUpperCase();
    const created = await Promise.all([upper, projectId, upper].map((p) => task.post<{ taskId: string; projectId: string; taskNumber: string }>('/tasks', { projectId: p, title: 't', dataUri: 's3://b/1.jpg' }, key())));
    expect(created.map((r) => r.status), JSON.stringify(created.map((r) => r.body))).toEqual([201, 201, 201]);
    expect(new Set(created.map((r) => r.body.projectId))).toEqual(new Set([projectId]));
    expect(new Set(created.map((r) => r.body.taskNumber)).size).toBe(3);
  });
});
