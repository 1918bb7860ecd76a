import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { buildService, listen, loadConfig, type BuiltService } from '@labelflow/service-kit';
import { as, buildTestService, eventually, freshSnowflake, refusal, type InProcessService } from '@labelflow/testing';
import { BillingSvcConfig } from '../config';
import { billingService } from '../service';

const infra = inject('infra');

interface ProjectView {
  readonly projectId: string;
  readonly name: string;
  readonly currency: string;
  readonly pricePerTask: number;
  readonly balance: number;
  readonly totalToppedUp: number;
  readonly totalDebited: number;
}
interface LedgerEntry {
  readonly kind: string;
  readonly taskId: string | null;
  readonly annotatorId: string | null;
  readonly amount: number;
  readonly actor: string | null;
}
interface Payouts {
  readonly annotatorId: string;
  readonly balances?: Readonly<Record<string, number>>;
  readonly entries: readonly LedgerEntry[];
  readonly nextCursor: string | null;
}
interface TaskBilling {
  readonly taskId: string;
  readonly billings: readonly { readonly status: string; readonly amount: number; readonly approvedBy: string | null }[];
  readonly ledger: readonly LedgerEntry[];
}

const price = 250;
const newProject = { name: 'cats', budget: 10_000, pricePerTask: price };
const elsewhere = randomUUID();
const stranger = as.owner('own-elsewhere', elsewhere);

describe('billing-svc project routes, answered in-process', () => {
  let svc: InProcessService<BuiltService<BillingSvcConfig>>;
  let project: ProjectView;
  const people = () => ({
    owner: as.owner('own-1', project.projectId),
    manager: as.manager('mgr-1', project.projectId),
    reviewer: as.reviewer('rev-1', project.projectId),
    annotator: as.annotator('ann-1', project.projectId),
  });
  /** Approved by rev-1 for ann-1, billed from the project's budget. */
  const billed = [freshSnowflake(), freshSnowflake()];

  const createProject = async (body: Record<string, unknown> = newProject) => {
    const created = await svc.http(as.admin()).post<ProjectView>('/projects', body, { 'idempotency-key': randomUUID() });
    expect(created.status).toBe(201);
    return created.body;
  };

  beforeAll(async () => {
    svc = await buildTestService(infra, 'billing-svc', (env) => buildService(billingService, loadConfig(BillingSvcConfig, env)));
    project = await createProject();
    // Billing reacts to qa-svc's approvals: planted on the real QA topic, applied by the service's own consumer.
    await listen(svc.built);
    for (const taskId of billed) await svc.plant('QaPassed', { taskId, projectId: project.projectId, attempt: 1 }, { annotatorId: 'ann-1', reviewerId: 'rev-1' });
    await eventually(async () => {
      for (const taskId of billed) expect((await svc.http(as.admin()).get<TaskBilling>(`/tasks/${taskId}/billing`)).body.billings).toHaveLength(1);
    });
  });
  afterAll(async () => {
    await svc?.close();
  });

  describe('POST /projects', () => {
    it('creates a project for a platform admin with its budget booked, and replays it for the same key', async () => {
      const key = randomUUID();
      const created = await svc.http(as.admin()).post<ProjectView>('/projects', newProject, { 'idempotency-key': key });
      expect(created.status).toBe(201);
      expect(created.body).toMatchObject({ projectId: expect.stringMatching(/^[0-9a-f-]{36}$/), name: 'cats', currency: 'USD', pricePerTask: price, balance: 10_000, totalToppedUp: 10_000, totalDebited: 0 });
      const replayed = await svc.http(as.admin()).post<ProjectView>('/projects', newProject, { 'idempotency-key': key });
      expect(replayed).toMatchObject({ status: 201, body: created.body });
      expect(replayed.headers.get('idempotent-replayed')).toBe('true');
    });

    it('answers 400 VALIDATION_FAILED naming each field that failed its schema', async () => {
      const answer = await svc.http(as.admin()).post('/projects', { name: ' ', budget: -1, pricePerTask: 0, currency: 'usd' }, { 'idempotency-key': randomUUID() });
      expect(refusal(answer)).toEqual({ status: 400, code: 'VALIDATION_FAILED', paths: ['body.name', 'body.budget', 'body.pricePerTask', 'body.currency'] });
    });

    it('answers 401 without a token', async () => {
      expect(refusal(await svc.http(null).post('/projects', newProject, { 'idempotency-key': randomUUID() }))).toEqual({ status: 401, code: 'TOKEN_MISSING' });
    });

    it('answers 403 FORBIDDEN to anyone but a platform admin, whatever their roles', async () => {
      expect(refusal(await svc.http(people().owner).post('/projects', newProject, { 'idempotency-key': randomUUID() }))).toEqual({ status: 403, code: 'FORBIDDEN' });
    });

    it('answers 400 IDEMPOTENCY_KEY_REQUIRED without a key', async () => {
      expect(refusal(await svc.http(as.admin()).post('/projects', newProject))).toEqual({ status: 400, code: 'IDEMPOTENCY_KEY_REQUIRED' });
    });
  });

  describe('POST /projects/:projectId/top-ups', () => {
    it('adds to the balance for an owner, once per key', async () => {
      const fresh = await createProject();
      const owner = as.owner('own-1', fresh.projectId);
      const key = randomUUID();
      const topped = await svc.http(owner).post<ProjectView>(`/projects/${fresh.projectId}/top-ups`, { amount: 500 }, { 'idempotency-key': key });
      expect(topped.status).toBe(200);
      expect(topped.body).toMatchObject({ balance: 10_500, totalToppedUp: 10_500 });
      const replayed = await svc.http(owner).post<ProjectView>(`/projects/${fresh.projectId}/top-ups`, { amount: 500 }, { 'idempotency-key': key });
      expect(replayed).toMatchObject({ status: 200, body: { balance: 10_500 } });
      expect(replayed.headers.get('idempotent-replayed')).toBe('true');
    });

    it('answers 400 VALIDATION_FAILED for a malformed project id or an amount below 1', async () => {
      expect(refusal(await svc.http(as.admin()).post('/projects/nope/top-ups', { amount: 1 }, { 'idempotency-key': randomUUID() }))).toEqual({ status: 400, code: 'VALIDATION_FAILED', paths: ['path.projectId'] });
      expect(refusal(await svc.http(people().owner).post(`/projects/${project.projectId}/top-ups`, { amount: 0 }, { 'idempotency-key': randomUUID() }))).toEqual({ status: 400, code: 'VALIDATION_FAILED', paths: ['body.amount'] });
    });

    it('answers 401 without a token', async () => {
      expect(refusal(await svc.http(null).post(`/projects/${project.projectId}/top-ups`, { amount: 1 }, { 'idempotency-key': randomUUID() }))).toEqual({ status: 401, code: 'TOKEN_MISSING' });
    });

    it('answers 404 PROJECT_NOT_FOUND across tenants and, for an admin, for a project that does not exist', async () => {
      expect(refusal(await svc.http(stranger).post(`/projects/${project.projectId}/top-ups`, { amount: 1 }, { 'idempotency-key': randomUUID() }))).toEqual({ status: 404, code: 'PROJECT_NOT_FOUND' });
      expect(refusal(await svc.http(as.admin()).post(`/projects/${randomUUID()}/top-ups`, { amount: 1 }, { 'idempotency-key': randomUUID() }))).toEqual({ status: 404, code: 'PROJECT_NOT_FOUND' });
    });

    it('answers 403 FORBIDDEN to managers, who do not answer for the budget', async () => {
      expect(refusal(await svc.http(people().manager).post(`/projects/${project.projectId}/top-ups`, { amount: 1 }, { 'idempotency-key': randomUUID() }))).toEqual({ status: 403, code: 'FORBIDDEN' });
    });

    it('answers 400 IDEMPOTENCY_KEY_REQUIRED without a key', async () => {
      expect(refusal(await svc.http(people().owner).post(`/projects/${project.projectId}/top-ups`, { amount: 1 }))).toEqual({ status: 400, code: 'IDEMPOTENCY_KEY_REQUIRED' });
    });
  });

  describe('GET /projects/:projectId', () => {
    it('shows a manager the project with what its billed tasks debited', async () => {
      const seen = await svc.http(people().manager).get<ProjectView>(`/projects/${project.projectId}`);
      expect(seen.status).toBe(200);
      expect(seen.body).toMatchObject({ projectId: project.projectId, balance: 10_000 - 2 * price, totalDebited: 2 * price });
    });

    it('answers 400 VALIDATION_FAILED for a malformed project id', async () => {
      expect(refusal(await svc.http(as.admin()).get('/projects/123'))).toEqual({ status: 400, code: 'VALIDATION_FAILED', paths: ['path.projectId'] });
    });

    it('answers 401 without a token', async () => {
      expect(refusal(await svc.http(null).get(`/projects/${project.projectId}`))).toEqual({ status: 401, code: 'TOKEN_MISSING' });
    });

    it('answers 404 PROJECT_NOT_FOUND across tenants and for a project that does not exist', async () => {
      expect(refusal(await svc.http(stranger).get(`/projects/${project.projectId}`))).toEqual({ status: 404, code: 'PROJECT_NOT_FOUND' });
      expect(refusal(await svc.http(as.admin()).get(`/projects/${randomUUID()}`))).toEqual({ status: 404, code: 'PROJECT_NOT_FOUND' });
    });

    it('answers 403 FORBIDDEN to reviewers and annotators', async () => {
      for (const who of [people().reviewer, people().annotator]) expect(refusal(await svc.http(who).get(`/projects/${project.projectId}`))).toEqual({ status: 403, code: 'FORBIDDEN' });
    });
  });

  describe('GET /annotators/:annotatorId/payouts', () => {
    it('shows the annotator her balance in each currency and every credit, page by page, without the reviewer who approved it', async () => {
      const first = await svc.http(people().annotator).get<Payouts>('/annotators/ann-1/payouts?limit=1');
      expect(first.status).toBe(200);
      expect(first.body).toMatchObject({ annotatorId: 'ann-1', balances: { USD: 2 * price }, entries: [{ kind: 'credit', taskId: billed[0], amount: price, currency: 'USD' }] });
      expect(first.body.entries[0]).not.toHaveProperty('actor');
      const second = await svc.http(people().annotator).get<Payouts>(`/annotators/ann-1/payouts?limit=1&cursor=${first.body.nextCursor}`);
      expect(second.body.entries.map((e) => e.taskId)).toEqual([billed[1]]);
      expect(second.body.nextCursor).toBeNull();
    });

    it('shows a manager the credits of her projects without the balances, which span projects she may not see', async () => {
      const seen = await svc.http(people().manager).get<Payouts>('/annotators/ann-1/payouts');
      expect(seen.status).toBe(200);
      expect(seen.body.entries).toHaveLength(2);
      expect(seen.body.entries.map((e) => e.actor)).toEqual(['rev-1', 'rev-1']);
      expect(seen.body).not.toHaveProperty('balances');
    });

    it('lists the reversal that undid a credit after it, so the entries add up to what she is owed', async () => {
      const undone = freshSnowflake();
      await svc.plant('QaPassed', { taskId: undone, projectId: project.projectId, attempt: 1 }, { annotatorId: 'ann-undone', reviewerId: 'rev-1' });
      await eventually(async () => expect((await svc.http(as.admin()).get<TaskBilling>(`/tasks/${undone}/billing`)).body.billings).toHaveLength(1));
      await svc.plant('TaskCancelled', { taskId: undone, projectId: project.projectId, attempt: 1 }, { reason: 'withdrawn', cancelledBy: 'mgr-1', previousStatus: 'completed' });
      await eventually(async () => expect((await svc.http(as.admin()).get<TaskBilling>(`/tasks/${undone}/billing`)).body.billings[0]?.status).toBe('refunded'));

      const seen = await svc.http(people().manager).get<Payouts>('/annotators/ann-undone/payouts');
      expect(seen.body.entries.map((e) => [e.kind, e.amount])).toEqual([['credit', price], ['reversal', price]]);
      const own = await svc.http(as.annotator('ann-undone', project.projectId)).get<Payouts>('/annotators/ann-undone/payouts');
      expect(own.body.balances).toEqual({ USD: 0 });
      expect(own.body.entries.reduce((sum, e) => sum + (e.kind === 'reversal' ? -e.amount : e.amount), 0)).toBe(0);
    });

    it('answers an annotator never paid, asking about herself, with no balances and no entries', async () => {
      expect((await svc.http(as.annotator('ann-new', project.projectId)).get<Payouts>('/annotators/ann-new/payouts')).body).toEqual({ annotatorId: 'ann-new', balances: {}, entries: [], nextCursor: null });
    });

    it('answers 404 ANNOTATOR_NOT_FOUND to whoever may not see her payouts', async () => {
      expect(refusal(await svc.http(people().reviewer).get('/annotators/ann-1/payouts'))).toEqual({ status: 404, code: 'ANNOTATOR_NOT_FOUND' });
      expect(refusal(await svc.http(stranger).get('/annotators/ann-1/payouts'))).toEqual({ status: 404, code: 'ANNOTATOR_NOT_FOUND' });
    });

    it('answers 400 VALIDATION_FAILED for a malformed annotator id or limit', async () => {
      expect(refusal(await svc.http(as.admin()).get('/annotators/-ann/payouts?limit=0'))).toEqual({ status: 400, code: 'VALIDATION_FAILED', paths: ['path.annotatorId'] });
      expect(refusal(await svc.http(as.admin()).get('/annotators/ann-1/payouts?limit=0'))).toEqual({ status: 400, code: 'VALIDATION_FAILED', paths: ['query.limit'] });
    });

    it('answers 401 without a token', async () => {
      expect(refusal(await svc.http(null).get('/annotators/ann-1/payouts'))).toEqual({ status: 401, code: 'TOKEN_MISSING' });
    });
  });

  describe('GET /tasks/:taskId/billing', () => {
    it('shows a manager the billing of an approved task and the debit and credit it booked', async () => {
      const seen = await svc.http(people().manager).get<TaskBilling>(`/tasks/${billed[0]}/billing`);
      expect(seen.status).toBe(200);
      expect(seen.body.billings).toMatchObject([{ status: 'completed', amount: price, approvedBy: 'rev-1' }]);
      expect(seen.body.ledger.map((e) => [e.kind, e.amount, e.actor])).toEqual([['debit', price, 'rev-1'], ['credit', price, 'rev-1']]);
    });

    it('answers a platform admin with empty lists for a task it never billed, and everyone else 404 TASK_NOT_FOUND', async () => {
      const unknown = freshSnowflake();
      expect((await svc.http(as.admin()).get<TaskBilling>(`/tasks/${unknown}/billing`)).body).toEqual({ taskId: unknown, billings: [], ledger: [] });
      expect(refusal(await svc.http(people().manager).get(`/tasks/${unknown}/billing`))).toEqual({ status: 404, code: 'TASK_NOT_FOUND' });
    });

    it('answers 404 TASK_NOT_FOUND across tenants and 403 FORBIDDEN to reviewers and annotators', async () => {
      expect(refusal(await svc.http(stranger).get(`/tasks/${billed[0]}/billing`))).toEqual({ status: 404, code: 'TASK_NOT_FOUND' });
      for (const who of [people().reviewer, people().annotator]) expect(refusal(await svc.http(who).get(`/tasks/${billed[0]}/billing`))).toEqual({ status: 403, code: 'FORBIDDEN' });
    });

    it('answers 400 VALIDATION_FAILED for a malformed task id', async () => {
      expect(refusal(await svc.http(as.admin()).get('/tasks/abc/billing'))).toEqual({ status: 400, code: 'VALIDATION_FAILED', paths: ['path.taskId'] });
    });

    it('answers 401 without a token', async () => {
      expect(refusal(await svc.http(null).get(`/tasks/${billed[0]}/billing`))).toEqual({ status: 401, code: 'TOKEN_MISSING' });
    });
  });
});
