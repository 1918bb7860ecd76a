import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { buildService, listen, loadConfig, type BuiltService } from '@labelflow/service-kit';
import { as, buildTestService, eventually, freshSnowflake, refusal, type InProcessService } from '@labelflow/testing';
import { BillingSvcConfig } from '../config';
import { billingService } from '../service';

const infra = inject('infra');

interface Billings {
  readonly taskId: string;
  readonly billings: readonly { readonly attempt: number; readonly status: string; readonly amount: number; readonly reason: string | null; readonly approvedBy: string | null }[];
}

const price = 100;

describe('billing-svc POST /tasks/:taskId/billing/retry, answered in-process', () => {
  let svc: InProcessService<BuiltService<BillingSvcConfig>>;
  let projectId: string;
  const people = () => ({
    owner: as.owner('own-1', projectId),
    manager: as.manager('mgr-1', projectId),
    reviewer: as.reviewer('rev-1', projectId),
    annotator: as.annotator('ann-1', projectId),
  });
  /** Approved while the project had no budget: its billing failed. */
  const failed = freshSnowflake();

  beforeAll(async () => {
    svc = await buildTestService(infra, 'billing-svc', (env) => buildService(billingService, loadConfig(BillingSvcConfig, env)));
    const created = await svc.http(as.admin()).post<{ projectId: string }>('/projects', { name: 'broke', budget: 0, pricePerTask: price }, { 'idempotency-key': randomUUID() });
    expect(created.status).toBe(201);
    projectId = created.body.projectId;
    // The approval comes from qa-svc: planted on the real QA topic, applied by the service's own consumer.
    await listen(svc.built);
    await svc.plant('QaPassed', { taskId: failed, projectId, attempt: 1 }, { annotatorId: 'ann-1', reviewerId: 'rev-1' });
    await eventually(async () => {
      const seen = await svc.http(as.admin()).get<Billings>(`/tasks/${failed}/billing`);
      expect(seen.body.billings).toMatchObject([{ status: 'failed', reason: 'INSUFFICIENT_BUDGET' }]);
    });
  });
  afterAll(async () => {
    await svc?.close();
  });

  it('answers 400 VALIDATION_FAILED for a malformed task id or a body with anything in it', async () => {
    expect(refusal(await svc.http(people().manager).post('/tasks/9x/billing/retry'))).toEqual({ status: 400, code: 'VALIDATION_FAILED', paths: ['path.taskId'] });
    expect(refusal(await svc.http(people().manager).post(`/tasks/${failed}/billing/retry`, { force: true }))).toEqual({ status: 400, code: 'VALIDATION_FAILED', paths: ['body'] });
  });

  it('answers 401 without a token', async () => {
    expect(refusal(await svc.http(null).post(`/tasks/${failed}/billing/retry`))).toEqual({ status: 401, code: 'TOKEN_MISSING' });
  });

  it('answers a task it never billed 404 TASK_NOT_FOUND, except to a platform admin, who learns there is nothing to retry', async () => {
    const unknown = freshSnowflake();
    expect(refusal(await svc.http(people().manager).post(`/tasks/${unknown}/billing/retry`))).toEqual({ status: 404, code: 'TASK_NOT_FOUND' });
    expect(refusal(await svc.http(as.admin()).post(`/tasks/${unknown}/billing/retry`))).toEqual({ status: 409, code: 'NOTHING_TO_RETRY' });
  });

  it('answers 404 TASK_NOT_FOUND across tenants and 403 FORBIDDEN to reviewers and annotators', async () => {
    expect(refusal(await svc.http(as.manager('mgr-elsewhere', randomUUID())).post(`/tasks/${failed}/billing/retry`))).toEqual({ status: 404, code: 'TASK_NOT_FOUND' });
    for (const who of [people().reviewer, people().annotator]) expect(refusal(await svc.http(who).post(`/tasks/${failed}/billing/retry`))).toEqual({ status: 403, code: 'FORBIDDEN' });
  });

  it('answers 409 INSUFFICIENT_BUDGET while the budget is still short, and changes nothing', async () => {
    expect(refusal(await svc.http(people().manager).post(`/tasks/${failed}/billing/retry`, {}))).toEqual({ status: 409, code: 'INSUFFICIENT_BUDGET' });
    expect((await svc.http(as.admin()).get<Billings>(`/tasks/${failed}/billing`)).body.billings).toMatchObject([{ status: 'failed' }]);
  });

  it('bills the task after a top-up, replays the answer for the same key and then has nothing left to retry', async () => {
    expect((await svc.http(people().owner).post(`/projects/${projectId}/top-ups`, { amount: price }, { 'idempotency-key': randomUUID() })).status).toBe(200);
    const key = randomUUID();
    const retried = await svc.http(people().manager).post<Billings>(`/tasks/${failed}/billing/retry`, undefined, { 'idempotency-key': key });
    expect(retried.status).toBe(200);
    // The approval decided the payment: the retry keeps the approving reviewer.
    expect(retried.body).toMatchObject({ taskId: failed, billings: [{ attempt: 1, status: 'completed', amount: price, approvedBy: 'rev-1' }] });
    const replayed = await svc.http(people().manager).post<Billings>(`/tasks/${failed}/billing/retry`, undefined, { 'idempotency-key': key });
    expect(replayed).toMatchObject({ status: 200, body: retried.body });
    expect(replayed.headers.get('idempotent-replayed')).toBe('true');
    expect(refusal(await svc.http(people().manager).post(`/tasks/${failed}/billing/retry`))).toEqual({ status: 409, code: 'NOTHING_TO_RETRY' });
  });
});
