import { DEV_AUDIENCE, DEV_ISSUER, generateSigningKey, issueToken, loadOrCreateDevKey } from '@labelflow/auth';
import type { ServiceName } from '@labelflow/contracts';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { as, eventually, httpClient, queryRows, startStack, type HttpResult, type TestIdentity, type TestStack } from '@labelflow/testing';
import { labelsView } from './saga';

type Body = { error?: { code: string; message: string } } & Record<string, unknown>;
const key = () => ({ 'idempotency-key': crypto.randomUUID() });
const wait = { prefer: 'wait=20' };
const Role = ['owner', 'manager', 'reviewer', 'annotator'] as const;
type Role = (typeof Role)[number];

/**
 * The services as an attacker reaches them: every port, no gateway. Who may do what is the matrix
 * in docs/http-api.md; this file states it again, independently of the code that enforces it.
 */
describe('authentication, project roles and tenant isolation', () => {
  let stack: TestStack;
  let victim: string;
  let own: string;
  let other: string;
  const admin = as.admin('sec-admin');

  const http = (service: ServiceName, identity: TestIdentity | null) => stack.http(service, identity);
  const expectStatus = (res: HttpResult<Body>, status: number, code?: string) => {
    expect(res.status, JSON.stringify(res.body)).toBe(status);
    if (code) expect(res.body.error?.code).toBe(code);
  };

  async function createProject(budget: number): Promise<string> {
    const res = await http('billing-svc', admin).post<Body & { projectId: string }>('/projects', { name: 'sec', budget, pricePerTask: 100 }, key());
    expectStatus(res, 201);
    return res.body.projectId;
  }
  async function createTask(projectId: string): Promise<string> {
    const res = await http('task-svc', admin).post<Body & { taskId: string }>('/tasks', { projectId, title: 'is it a cat?', dataUri: 's3://b/cat.jpg' }, key());
    expectStatus(res, 201);
    return res.body.taskId;
  }
  /** Claims as `annotator`, and waits until label-svc has the assignment (so its project is known there). */
  async function assign(taskId: string, projectId: string, annotator: string): Promise<void> {
    expectStatus(await http('task-svc', as.annotator(annotator, projectId)).post(`/tasks/${taskId}/claim`, {}), 200);
    await eventually(() => labelsView(stack, taskId, admin));
  }
  async function label(taskId: string, projectId: string, annotator: string): Promise<void> {
    const res = await http('label-svc', as.annotator(annotator, projectId)).post<Body>(`/tasks/${taskId}/labels`, { annotations: [{ label: 'cat', confidence: 0.9 }] }, wait);
    expectStatus(res, 201);
    await eventually(async () => expectStatus(await http('qa-svc', admin).get(`/reviews/${taskId}`), 200));
  }
  async function approve(taskId: string, projectId: string, reviewer: string): Promise<void> {
    expectStatus(await http('qa-svc', as.reviewer(reviewer, projectId)).post(`/reviews/${taskId}`, { decision: 'approve' }, wait), 200);
  }
  async function waitStatus(taskId: string, status: string): Promise<void> {
    await eventually(async () => expect((await http('task-svc', admin).get<{ status: string }>(`/tasks/${taskId}`)).body.status).toBe(status), { timeoutMs: 60_000 });
  }

  beforeAll(async () => {
    stack = await startStack(inject('infra'));
    [victim, own, other] = await Promise.all([createProject(10_000), createProject(100_000), createProject(10_000)]);
  });
  afterAll(async () => stack?.stop());

  it('answers 401 with a Bearer challenge to a call without a token on every endpoint, and serves the probes to anyone', async () => {
    const taskId = '1000000000000000001';
    const calls: [ServiceName, 'get' | 'post', string, unknown?][] = [
      ['task-svc', 'post', '/tasks', { projectId: victim, title: 't', dataUri: 's3://b/x' }],
      ['task-svc', 'post', `/tasks/${taskId}/claim`, {}],
      ['task-svc', 'post', `/tasks/${taskId}/cancel`, { reason: 'r' }],
      ['task-svc', 'get', `/tasks/${taskId}`],
      ['task-svc', 'get', '/tasks'],
      ['label-svc', 'post', `/tasks/${taskId}/labels`, { annotations: [{ label: 'x' }] }],
      ['label-svc', 'get', `/tasks/${taskId}/labels`],
      ['qa-svc', 'post', `/reviews/${taskId}`, { decision: 'approve' }],
      ['qa-svc', 'get', `/reviews/${taskId}`],
      ['qa-svc', 'get', '/reviews'],
      ['billing-svc', 'post', '/projects', { name: 'p', budget: 1, pricePerTask: 1 }],
      ['billing-svc', 'post', `/projects/${victim}/top-ups`, { amount: 1 }],
      ['billing-svc', 'get', `/projects/${victim}`],
      ['billing-svc', 'post', `/tasks/${taskId}/billing/retry`],
      ['billing-svc', 'get', `/tasks/${taskId}/billing`],
      ['billing-svc', 'get', '/annotators/ann-1/payouts'],
      ...(['task-svc', 'label-svc', 'qa-svc', 'billing-svc'] as const).map((s): [ServiceName, 'get', string] => [s, 'get', '/metrics']),
    ];
    for (const [service, method, path, body] of calls) {
      const client = http(service, null);
      const res = method === 'get' ? await client.get<Body>(path) : await client.post<Body>(path, body, key());
      expect(res.status, `${method.toUpperCase()} ${path}`).toBe(401);
      expect(res.body.error?.code).toBe('TOKEN_MISSING');
      expect(res.headers.get('www-authenticate')).toMatch(/^Bearer realm="labelflow"/);
    }
    for (const service of ['task-svc', 'billing-svc'] as const) {
      expect((await http(service, null).get('/healthz')).status).toBe(200);
      expect((await http(service, null).get('/readyz')).status).toBe(200);
    }
  });

  it('refuses a forged, expired or wrongly addressed token with invalid_token', async () => {
    const forgedKey = await generateSigningKey();
    const base = { issuer: DEV_ISSUER, audience: DEV_AUDIENCE, subject: 'mallory', admin: true };
    const forged = await issueToken({ jwk: forgedKey.privateJwk }, base);
    const { privateJwk } = await loadOrCreateDevKey();
    const expired = await issueToken({ jwk: privateJwk }, { ...base, now: new Date(Date.now() - 7_200_000), ttlS: 3600 });
    const elsewhere = await issueToken({ jwk: privateJwk }, { ...base, audience: 'another-api' });
    const url = stack.processes['billing-svc'].url;
    for (const token of [forged, expired, elsewhere, 'not-a-jwt']) {
      const res = await httpClient(url, null).post<Body>(`/projects/${victim}/top-ups`, { amount: 1_000_000 }, { ...key(), authorization: `Bearer ${token}` });
      expect(res.status).toBe(401);
      expect(res.body.error?.code).toBe('TOKEN_INVALID');
      expect(res.headers.get('www-authenticate')).toMatch(/error="invalid_(token|request)"/);
    }
  });

  it('keeps a member of another project out: no listing, reading, creating, claiming, labelling, reviewing, billing or topping up, and the victim\'s books do not move', async () => {
    // A victim task in every stage an attacker might aim at.
    const [open, labelled, done] = await Promise.all([createTask(victim), createTask(victim), createTask(victim)]);
    await Promise.all([assign(labelled, victim, 'v-ann'), assign(done, victim, 'v-ann2')]);
    await Promise.all([label(labelled, victim, 'v-ann'), label(done, victim, 'v-ann2')]);
    await approve(done, victim, 'v-rev');
    await waitStatus(done, 'completed');
    const books = async () => ({
      project: (await http('billing-svc', admin).get(`/projects/${victim}`)).body,
      ledger: await queryRows(stack.databases['billing-svc'], 'SELECT id, kind, amount, task_id, annotator_id FROM ledger WHERE project_id = $1 ORDER BY id', [victim]),
      tasks: await queryRows(stack.databases['task-svc'], 'SELECT task_id, status, assignee FROM tasks WHERE project_id = $1 ORDER BY task_id', [victim]),
    });
    // The labelled task moves on in task-svc as its events arrive there, on their own time.
    await stack.quiesce();
    const before = await books();

    // Mallory holds every role, in her own project only.
    const mallory: TestIdentity = { user: 'mallory', projects: { [other]: ['owner', 'manager', 'reviewer', 'annotator'] } };
    const [task, labels, qa, billing] = (['task-svc', 'label-svc', 'qa-svc', 'billing-svc'] as const).map((s) => http(s, mallory));
    const refusals: [string, Promise<HttpResult<Body>>, number][] = [
      ['list the victim project', task!.get(`/tasks?projectId=${victim}`), 404],
      ['read a victim task', task!.get(`/tasks/${open}`), 404],
      ['create a task in the victim project', task!.post('/tasks', { projectId: victim, title: 't', dataUri: 's3://b/x' }, key()), 404],
      ['claim a victim task', task!.post(`/tasks/${open}/claim`, {}), 404],
      ['cancel a victim task', task!.post(`/tasks/${labelled}/cancel`, { reason: 'sabotage' }), 404],
      // As for a task label-svc never heard of: nothing tells the two apart.
      ['label a victim task', labels!.post(`/tasks/${labelled}/labels`, { annotations: [{ label: 'dog' }] }), 409],
      ['read a victim task\'s labels', labels!.get(`/tasks/${labelled}/labels`), 404],
      ['review a victim task', qa!.post(`/reviews/${labelled}`, { decision: 'approve' }), 404],
      ['read a victim review', qa!.get(`/reviews/${labelled}`), 404],
      ['top up the victim project', billing!.post(`/projects/${victim}/top-ups`, { amount: 1 }, key()), 404],
      ['read the victim project', billing!.get(`/projects/${victim}`), 404],
      ['read a victim task\'s billing', billing!.get(`/tasks/${done}/billing`), 404],
      ['retry a victim task\'s billing', billing!.post(`/tasks/${done}/billing/retry`), 404],
      ['read a victim annotator\'s payouts', billing!.get('/annotators/v-ann2/payouts'), 404],
      ['create a project as a non-admin', billing!.post('/projects', { name: 'mine', budget: 1, pricePerTask: 1 }, key()), 403],
    ];
    for (const [what, call, status] of refusals) expect((await call).status, what).toBe(status);
    // Lists name only her projects.
    const tasks = await task!.get<{ tasks: { projectId: string }[] }>('/tasks');
    expect(tasks.body.tasks.filter((t) => t.projectId === victim)).toEqual([]);
    const reviews = await qa!.get<{ reviews: { projectId: string }[] }>('/reviews');
    expect(reviews.body.reviews.filter((r) => r.projectId === victim)).toEqual([]);

    await stack.quiesce();
    expect(await books()).toEqual(before);
  });

  it('refuses claiming, labelling or reviewing in someone else\'s name', async () => {
    const taskId = await createTask(own);
    const mallory = as.annotator('mallory', own);
    const claim = await http('task-svc', mallory).post<Body>(`/tasks/${taskId}/claim`, { annotatorId: 'alice' });
    expectStatus(claim, 403, 'ACTOR_MISMATCH');
    await assign(taskId, own, 'alice');
    const asAlice = await http('label-svc', mallory).post<Body>(`/tasks/${taskId}/labels`, { annotatorId: 'alice', annotations: [{ label: 'cat' }] });
    expectStatus(asAlice, 403, 'ACTOR_MISMATCH');
    // In her own name she is not the assignee.
    const notHers = await http('label-svc', mallory).post<Body>(`/tasks/${taskId}/labels`, { annotations: [{ label: 'cat' }] });
    expectStatus(notHers, 403, 'NOT_ASSIGNEE');
    await label(taskId, own, 'alice');
    const asBob = await http('qa-svc', as.reviewer('mallory', own)).post<Body>(`/reviews/${taskId}`, { reviewerId: 'bob', decision: 'approve' });
    expectStatus(asBob, 403, 'ACTOR_MISMATCH');
  });

  it('never lets an annotator review labels she submitted, for any attempt of the task, nor the reviewer who rejected an attempt, or anyone else who could read its labels, claim its rework', async () => {
    const taskId = await createTask(own);
    const both: TestIdentity = { user: 'eve', projects: { [own]: ['annotator', 'reviewer'] } };
    expectStatus(await http('task-svc', both).post(`/tasks/${taskId}/claim`, {}), 200);
    await eventually(() => labelsView(stack, taskId, admin));
    expectStatus(await http('label-svc', both).post(`/tasks/${taskId}/labels`, { annotations: [{ label: 'cat' }] }, wait), 201);
    const self = await http('qa-svc', both).post<Body>(`/reviews/${taskId}`, { decision: 'approve' }, wait);
    expectStatus(self, 403, 'SELF_REVIEW');
    // Someone else rejects; another annotator labels attempt 2; eve still may not judge the task.
    expectStatus(await http('qa-svc', as.reviewer('rita', own)).post(`/reviews/${taskId}`, { decision: 'reject', reason: 'boxes too loose' }), 200);
    await waitStatus(taskId, 'open');
    // rita turned attempt 1 down: holding the annotator role too, she still may not redo it.
    const ritaAlsoAnnotator: TestIdentity = { user: 'rita', projects: { [own]: ['reviewer', 'annotator'] } };
    expectStatus(await http('task-svc', ritaAlsoAnnotator).post(`/tasks/${taskId}/claim`, {}), 403, 'FORMER_REVIEWER');
    // Nor may anyone who could read attempt 1's labels without judging them: another reviewer, or a
    // manager (the labels read, the timeline), who also holds the annotator role.
    for (const roles of [['reviewer', 'annotator'], ['manager', 'annotator']] as const) {
      const reader: TestIdentity = { user: `reader-${roles[0]}`, projects: { [own]: [...roles] } };
      expectStatus(await http('task-svc', reader).post(`/tasks/${taskId}/claim`, {}), 403, 'MAY_READ_EARLIER_WORK');
    }
    expectStatus(await http('task-svc', as.annotator('frank', own)).post(`/tasks/${taskId}/claim`, {}), 200);
    await eventually(async () => expect((await labelsView(stack, taskId, admin)).assignment?.attempt).toBe(2));
    expectStatus(await http('label-svc', as.annotator('frank', own)).post(`/tasks/${taskId}/labels`, { annotations: [{ label: 'cat' }] }, wait), 201);
    const later = await http('qa-svc', both).post<Body>(`/reviews/${taskId}`, { decision: 'approve', attempt: 2 }, wait);
    expectStatus(later, 403, 'SELF_REVIEW');
    expectStatus(await http('qa-svc', as.reviewer('rita', own)).post(`/reviews/${taskId}`, { decision: 'approve', attempt: 2 }, wait), 200);
    await waitStatus(taskId, 'completed');
  });

  it('walks the permission matrix: every endpoint, every role, in its own project and in another', async () => {
    const identity = (role: Role, project: string): TestIdentity => ({ user: `m-${role}${project === own ? '' : '-elsewhere'}`, projects: { [project]: role } });
    // Fixtures in the own project: a completed task (its annotator paid), a labelled task awaiting
    // review, a task assigned to the matrix's annotator.
    const [done, labelled, assigned] = await Promise.all([createTask(own), createTask(own), createTask(own)]);
    await Promise.all([assign(done, own, 'worker'), assign(labelled, own, 'worker2'), assign(assigned, own, 'm-annotator')]);
    await Promise.all([label(done, own, 'worker'), label(labelled, own, 'worker2')]);
    await approve(done, own, 'approver');
    await waitStatus(done, 'completed');
    await eventually(async () => expect((await http('billing-svc', admin).get<{ billings: unknown[] }>(`/tasks/${done}/billing`)).body.billings).toHaveLength(1));

    type Caller = { name: string; identity: TestIdentity; role: Role | 'admin'; home: boolean };
    const callers: Caller[] = [
      { name: 'platform admin', identity: admin, role: 'admin', home: true },
      ...Role.flatMap((role) => [
        { name: `${role} of the project`, identity: identity(role, own), role, home: true },
        { name: `${role} of another project`, identity: identity(role, other), role, home: false },
      ]),
    ];
    // Each row: the endpoint, the roles allowed in their own project, whether a platform admin is,
    // what an allowed call answers, and a request (fresh fixtures where an allowed call changes state).
    type Row = { endpoint: string; allowed: readonly Role[]; admin: boolean; ok: number; projectless?: boolean; elsewhere?: number; send: (c: HttpResultSender) => Promise<HttpResult<Body>> };
    type HttpResultSender = { caller: Caller; fresh: () => Promise<string> };
    const freshTask = () => createTask(own);
    const rows: Row[] = [
      { endpoint: 'POST /projects', allowed: [], admin: true, ok: 201, projectless: true, send: ({ caller }) => http('billing-svc', caller.identity).post('/projects', { name: 'm', budget: 0, pricePerTask: 1 }, key()) },
      { endpoint: 'GET /projects/:id', allowed: ['owner', 'manager'], admin: true, ok: 200, send: ({ caller }) => http('billing-svc', caller.identity).get(`/projects/${own}`) },
      { endpoint: 'POST /projects/:id/top-ups', allowed: ['owner'], admin: true, ok: 200, send: ({ caller }) => http('billing-svc', caller.identity).post(`/projects/${own}/top-ups`, { amount: 1 }, key()) },
      { endpoint: 'POST /tasks', allowed: ['owner', 'manager'], admin: true, ok: 201, send: ({ caller }) => http('task-svc', caller.identity).post('/tasks', { projectId: own, title: 'm', dataUri: 's3://b/m' }, key()) },
      { endpoint: 'GET /tasks/:id', allowed: Role, admin: true, ok: 200, send: ({ caller }) => http('task-svc', caller.identity).get(`/tasks/${done}`) },
      { endpoint: 'GET /tasks?projectId', allowed: Role, admin: true, ok: 200, send: ({ caller }) => http('task-svc', caller.identity).get(`/tasks?projectId=${own}`) },
      { endpoint: 'POST /tasks/:id/claim', allowed: ['annotator'], admin: false, ok: 200, send: async ({ caller, fresh }) => http('task-svc', caller.identity).post(`/tasks/${await fresh()}/claim`, {}) },
      { endpoint: 'POST /tasks/:id/cancel', allowed: ['owner', 'manager'], admin: true, ok: 200, send: async ({ caller, fresh }) => http('task-svc', caller.identity).post(`/tasks/${await fresh()}/cancel`, { reason: 'matrix' }) },
      // Across tenants: as for a task label-svc has not heard of (409 ASSIGNMENT_UNKNOWN, "not yet").
      { endpoint: 'POST /tasks/:id/labels', allowed: ['annotator'], admin: false, ok: 201, elsewhere: 409, send: ({ caller }) => http('label-svc', caller.identity).post(`/tasks/${assigned}/labels`, { annotations: [{ label: 'cat' }] }) },
      { endpoint: 'GET /tasks/:id/labels', allowed: Role, admin: true, ok: 200, send: ({ caller }) => http('label-svc', caller.identity).get(`/tasks/${done}/labels`) },
      // A rejection without a reason is refused by the review itself (400), after authorization.
      { endpoint: 'POST /reviews/:id', allowed: ['owner', 'manager', 'reviewer'], admin: false, ok: 400, send: ({ caller }) => http('qa-svc', caller.identity).post(`/reviews/${labelled}`, { decision: 'reject' }) },
      { endpoint: 'GET /reviews/:id', allowed: Role, admin: true, ok: 200, send: ({ caller }) => http('qa-svc', caller.identity).get(`/reviews/${done}`) },
      { endpoint: 'GET /tasks/:id/billing', allowed: ['owner', 'manager'], admin: true, ok: 200, send: ({ caller }) => http('billing-svc', caller.identity).get(`/tasks/${done}/billing`) },
      // Already billed: nothing to retry, a business answer that comes only after authorization.
      { endpoint: 'POST /tasks/:id/billing/retry', allowed: ['owner', 'manager'], admin: true, ok: 409, send: ({ caller }) => http('billing-svc', caller.identity).post(`/tasks/${done}/billing/retry`) },
      { endpoint: 'GET /metrics', allowed: [], admin: true, ok: 200, projectless: true, send: ({ caller }) => http('qa-svc', caller.identity).get('/metrics') },
    ];
    const failures: string[] = [];
    for (const row of rows) {
      for (const caller of callers) {
        const allowed = caller.role === 'admin' ? row.admin : caller.home && row.allowed.includes(caller.role);
        const expected = allowed ? row.ok : row.projectless || caller.home ? 403 : (row.elsewhere ?? 404);
        const res = await row.send({ caller, fresh: freshTask });
        if (res.status !== expected) failures.push(`${row.endpoint} as ${caller.name}: expected ${expected}, got ${res.status} ${JSON.stringify(res.body).slice(0, 200)}`);
      }
    }
    expect(failures).toEqual([]);

    // Lists: every role gets 200 with its own projects' rows only.
    for (const caller of callers) {
      const res = await http('qa-svc', caller.identity).get<{ reviews: { projectId: string }[] }>('/reviews?limit=1000');
      expect(res.status).toBe(200);
      if (!caller.home) expect(res.body.reviews.filter((r) => r.projectId === own)).toEqual([]);
    }
    // Payouts: the annotator herself, the project's owners and managers, and admins.
    const payouts = (identity: TestIdentity) => http('billing-svc', identity).get<{ balances?: Record<string, number>; entries: unknown[] }>('/annotators/worker/payouts');
    const self = await payouts(as.annotator('worker', own));
    expect(self.status).toBe(200);
    expect(self.body.balances).toEqual({ USD: 100 });
    for (const role of ['owner', 'manager'] as const) {
      const seen = await payouts(identity(role, own));
      expect(seen.status).toBe(200);
      expect(seen.body.entries).toHaveLength(1);
      expect(seen.body.balances).toBeUndefined();
    }
    for (const role of ['reviewer', 'annotator'] as const) expect((await payouts(identity(role, own))).status).toBe(404);
    for (const role of Role) expect((await payouts(identity(role, other))).status).toBe(404);
    // People: an annotator sees the task but not who holds it, the manager does.
    const asAnnotator = await http('task-svc', identity('annotator', own)).get<Record<string, unknown>>(`/tasks/${done}`);
    expect(asAnnotator.body).not.toHaveProperty('assignee');
    const asManager = await http('task-svc', identity('manager', own)).get<Record<string, unknown>>(`/tasks/${done}`);
    expect(asManager.body.assignee).toBe('worker');
  });

  it('traces every ledger entry to the person whose decision booked it', async () => {
    const projectId = await createProject(1_000);
    expectStatus(await http('billing-svc', as.owner('olga', projectId)).post(`/projects/${projectId}/top-ups`, { amount: 500 }, key()), 200);
    const [paid, withdrawn] = await Promise.all([createTask(projectId), createTask(projectId)]);
    await Promise.all([assign(paid, projectId, 'ann-a'), assign(withdrawn, projectId, 'ann-b')]);
    await Promise.all([label(paid, projectId, 'ann-a'), label(withdrawn, projectId, 'ann-b')]);
    await Promise.all([approve(paid, projectId, 'rev-a'), approve(withdrawn, projectId, 'rev-b')]);
    await Promise.all([waitStatus(paid, 'completed'), waitStatus(withdrawn, 'completed')]);
    expectStatus(await http('task-svc', as.manager('mona', projectId)).post(`/tasks/${withdrawn}/cancel`, { reason: 'customer withdrew the sample' }), 200);
    await stack.quiesce();
    const ledger = await queryRows<{ kind: string; task_id: string | null; actor: string | null }>(
      stack.databases['billing-svc'],
      'SELECT kind, task_id, actor FROM ledger WHERE project_id = $1 ORDER BY id',
      [projectId],
    );
    const of = (taskId: string | null) => ledger.filter((e) => e.task_id === taskId).map((e) => [e.kind, e.actor]);
    expect(of(null)).toEqual([['topup', 'sec-admin'], ['topup', 'olga']]);
    expect(of(paid)).toEqual([['debit', 'rev-a'], ['credit', 'rev-a']]);
    expect(of(withdrawn)).toEqual([['debit', 'rev-b'], ['credit', 'rev-b'], ['refund', 'mona'], ['reversal', 'mona']]);
  });
});
