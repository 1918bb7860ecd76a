import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, inject, it, vi } from 'vitest';
import { buildService, listen, loadConfig, type BuiltService } from '@labelflow/service-kit';
import { as, buildTestService, eventually, freshSnowflake, refusal, type InProcessService } from '@labelflow/testing';
import { LabelSvcConfig } from '../config';
import { labelService } from '../service';

const infra = inject('infra');

interface LabelsView {
  readonly taskId: string;
  readonly cancelled: boolean;
  readonly assignment: { readonly attempt: number; readonly annotatorId?: string | null; readonly projectId: string };
  readonly labels: readonly { readonly attempt: number; readonly annotatorId?: string | null; readonly status: string; readonly annotations: unknown }[];
}

const project = randomUUID();
const elsewhere = randomUUID();
const manager = as.manager('mgr-1', project);
const reviewer = as.reviewer('rev-1', project);
const annotator = as.annotator('ann-1', project);
const otherAnnotator = as.annotator('ann-2', project);
const stranger = as.annotator('ann-elsewhere', elsewhere);
const annotations = [{ label: 'cat', confidence: 0.9 }];
const inADay = () => new Date(Date.now() + 86_400_000).toISOString();

/**
 * label-svc learns of a task only from task-svc's events: the tests plant `TaskAssigned` (and
 * `TaskCancelled`) on the real task topic, and the service's own consumer applies them.
 */
describe('label-svc routes, answered in-process', () => {
  let svc: InProcessService<BuiltService<LabelSvcConfig>>;
  /** Assigned to ann-1, lease running. */
  const assigned = freshSnowflake();
  /** Assigned to ann-1 with a lease that already ended. */
  const lapsed = freshSnowflake();
  /** Assigned, then cancelled. */
  const cancelled = freshSnowflake();

  beforeAll(async () => {
    svc = await buildTestService(infra, 'label-svc', (env) => buildService(labelService, loadConfig(LabelSvcConfig, env)));
    await listen(svc.built);
    await svc.plant('TaskAssigned', { taskId: assigned, projectId: project, attempt: 1 }, { annotatorId: 'ann-1', leaseExpiresAt: inADay() });
    await svc.plant('TaskAssigned', { taskId: lapsed, projectId: project, attempt: 1 }, { annotatorId: 'ann-1', leaseExpiresAt: new Date(Date.now() - 1_000).toISOString() });
    await svc.plant('TaskAssigned', { taskId: cancelled, projectId: project, attempt: 1 }, { annotatorId: 'ann-1', leaseExpiresAt: inADay() });
    await svc.plant('TaskCancelled', { taskId: cancelled, projectId: project, attempt: 1 }, { reason: 'duplicate item', cancelledBy: 'mgr-1', previousStatus: 'assigned' });
    // Events of one task keep their order on its partition: once the cancellation is applied, so is every assignment planted before it.
    await eventually(async () => {
      const seen = await svc.http(manager).get<LabelsView>(`/tasks/${cancelled}/labels`);
      expect(seen.body.cancelled).toBe(true);
      for (const taskId of [assigned, lapsed]) expect((await svc.http(manager).get(`/tasks/${taskId}/labels`)).status).toBe(200);
    });
  });
  afterAll(async () => {
    await svc?.close();
  });

  describe('POST /tasks/:taskId/labels', () => {
    it('answers 400 VALIDATION_FAILED for a malformed task id, no annotations or a misspelt field', async () => {
      expect(refusal(await svc.http(annotator).post('/tasks/x1/labels', { annotations }))).toEqual({ status: 400, code: 'VALIDATION_FAILED', paths: ['path.taskId'] });
      expect(refusal(await svc.http(annotator).post(`/tasks/${assigned}/labels`, { annotations: [] }))).toEqual({ status: 400, code: 'VALIDATION_FAILED', paths: ['body.annotations'] });
      expect(refusal(await svc.http(annotator).post(`/tasks/${assigned}/labels`, { annotations: [{ label: 'cat', confidnce: 0.9 }] }))).toEqual({ status: 400, code: 'VALIDATION_FAILED', paths: ['body.annotations.0'] });
    });

    it('answers 401 without a token', async () => {
      expect(refusal(await svc.http(null).post(`/tasks/${assigned}/labels`, { annotations }))).toEqual({ status: 401, code: 'TOKEN_MISSING' });
    });

    it('answers 403 ACTOR_MISMATCH when the body names someone other than the caller, before anything about the task', async () => {
      expect(refusal(await svc.http(annotator).post(`/tasks/${freshSnowflake()}/labels`, { annotatorId: 'ann-2', annotations }))).toEqual({ status: 403, code: 'ACTOR_MISMATCH' });
    });

    it('answers 409 ASSIGNMENT_UNKNOWN (not yet) for a task whose claim has not arrived, after the wait asked for', async () => {
      const unknown = freshSnowflake();
      expect(refusal(await svc.http(annotator).post(`/tasks/${unknown}/labels`, { annotations }))).toEqual({ status: 409, code: 'ASSIGNMENT_UNKNOWN' });
      const waited = await svc.http(annotator).post(`/tasks/${unknown}/labels`, { annotations }, { prefer: 'wait=1' });
      expect(refusal(waited)).toEqual({ status: 409, code: 'ASSIGNMENT_UNKNOWN' });
      expect(waited.headers.get('preference-applied')).toBe('wait=1');
    });

    it('answers a caller with no role in the project as if the task were unknown, so ids cannot be probed', async () => {
      expect(refusal(await svc.http(stranger).post(`/tasks/${assigned}/labels`, { annotations }))).toEqual({ status: 409, code: 'ASSIGNMENT_UNKNOWN' });
    });

    it('answers 403 FORBIDDEN to managers, reviewers and platform admins', async () => {
      for (const who of [manager, reviewer, as.admin()]) expect(refusal(await svc.http(who).post(`/tasks/${assigned}/labels`, { annotations }))).toEqual({ status: 403, code: 'FORBIDDEN' });
    });

    it('answers 403 NOT_ASSIGNEE to another annotator of the project', async () => {
      expect(refusal(await svc.http(otherAnnotator).post(`/tasks/${assigned}/labels`, { annotations }))).toEqual({ status: 403, code: 'NOT_ASSIGNEE' });
    });

    it('answers 409 ASSIGNMENT_UNKNOWN for an attempt not known yet, LEASE_EXPIRED after the lease and TASK_CANCELLED once cancelled', async () => {
      expect(refusal(await svc.http(annotator).post(`/tasks/${assigned}/labels`, { annotations, attempt: 2 }))).toEqual({ status: 409, code: 'ASSIGNMENT_UNKNOWN' });
      expect(refusal(await svc.http(annotator).post(`/tasks/${lapsed}/labels`, { annotations }))).toEqual({ status: 409, code: 'LEASE_EXPIRED' });
      expect(refusal(await svc.http(annotator).post(`/tasks/${cancelled}/labels`, { annotations }))).toEqual({ status: 409, code: 'TASK_CANCELLED' });
    });

    it('accepts the assignee\'s labels once, replays them for the same key and refuses a second submission', async () => {
      const key = randomUUID();
      const submitted = await svc.http(annotator).post<{ taskId: string; attempt: number; status: string; eventId: string }>(`/tasks/${assigned}/labels`, { annotations, attempt: 1 }, { 'idempotency-key': key });
      expect(submitted.status).toBe(201);
      expect(submitted.body).toEqual({ taskId: assigned, attempt: 1, status: 'submitted', eventId: expect.stringMatching(/^[1-9][0-9]*$/) });
      const replayed = await svc.http(annotator).post(`/tasks/${assigned}/labels`, { annotations, attempt: 1 }, { 'idempotency-key': key });
      expect(replayed).toMatchObject({ status: 201, body: submitted.body });
      expect(replayed.headers.get('idempotent-replayed')).toBe('true');
      expect(refusal(await svc.http(annotator).post(`/tasks/${assigned}/labels`, { annotations }))).toEqual({ status: 409, code: 'ALREADY_SUBMITTED' });
    });
  });

  describe('GET /tasks/:taskId/labels', () => {
    it('shows the assignment and labels, with the annotator named to managers and herself only', async () => {
      const toManager = await svc.http(manager).get<LabelsView>(`/tasks/${lapsed}/labels`);
      expect(toManager.status).toBe(200);
      expect(toManager.body).toMatchObject({ taskId: lapsed, cancelled: false, assignment: { attempt: 1, annotatorId: 'ann-1', projectId: project }, labels: [] });
      expect((await svc.http(annotator).get<LabelsView>(`/tasks/${lapsed}/labels`)).body.assignment.annotatorId).toBe('ann-1');
      const toReviewer = await svc.http(reviewer).get<LabelsView>(`/tasks/${lapsed}/labels`);
      expect(toReviewer.status).toBe(200);
      expect(toReviewer.body.assignment).not.toHaveProperty('annotatorId');
    });

    it('shows what was labelled to whoever labelled it and to those who review, never to another annotator who could submit it as theirs', async () => {
      const taskId = freshSnowflake();
      await svc.plant('TaskAssigned', { taskId, projectId: project, attempt: 1 }, { annotatorId: 'ann-1', leaseExpiresAt: inADay() });
      await eventually(async () => expect((await svc.http(manager).get<LabelsView>(`/tasks/${taskId}/labels`)).body.assignment?.annotatorId).toBe('ann-1'));
      expect((await svc.http(annotator).post(`/tasks/${taskId}/labels`, { annotations })).status).toBe(201);
      for (const who of [annotator, reviewer, manager, as.admin()]) {
        const view = await svc.http(who).get<LabelsView>(`/tasks/${taskId}/labels`);
        expect(view.body.labels.map((l) => l.annotations), who.user).toEqual([annotations]);
      }
      const toOther = await svc.http(otherAnnotator).get<LabelsView>(`/tasks/${taskId}/labels`);
      expect(toOther.status).toBe(200);
      expect(toOther.body.labels.map((l) => [l.attempt, l.status, 'annotations' in l])).toEqual([[1, 'submitted', false]]);
    });

    it('answers 400 VALIDATION_FAILED for a malformed task id', async () => {
      expect(refusal(await svc.http(manager).get('/tasks/-1/labels'))).toEqual({ status: 400, code: 'VALIDATION_FAILED', paths: ['path.taskId'] });
    });

    it('answers 401 without a token', async () => {
      expect(refusal(await svc.http(null).get(`/tasks/${assigned}/labels`))).toEqual({ status: 401, code: 'TOKEN_MISSING' });
    });

    it('answers 404 TASK_NOT_FOUND for a task it knows nothing of, and across tenants', async () => {
      expect(refusal(await svc.http(as.admin()).get(`/tasks/${freshSnowflake()}/labels`))).toEqual({ status: 404, code: 'TASK_NOT_FOUND' });
      expect(refusal(await svc.http(stranger).get(`/tasks/${assigned}/labels`))).toEqual({ status: 404, code: 'TASK_NOT_FOUND' });
    });

    it('reads no labels for a caller of another project: the project of the task is checked first', async () => {
      const pool = svc.built.ctx.pool;
      const statements: string[] = [];
      const query = pool.query.bind(pool);
      const spy = vi.spyOn(pool, 'query').mockImplementation(((text: unknown, ...rest: unknown[]) => {
        statements.push(typeof text === 'string' ? text : String((text as { text?: string }).text));
        return (query as (...a: unknown[]) => unknown)(text, ...rest);
      }) as typeof pool.query);
      try {
        expect(refusal(await svc.http(stranger).get(`/tasks/${assigned}/labels`))).toEqual({ status: 404, code: 'TASK_NOT_FOUND' });
      } finally {
        spy.mockRestore();
      }
      expect(statements.filter((s) => /FROM labels/.test(s))).toEqual([]);
      expect(statements.filter((s) => /FROM assignments/.test(s))).toHaveLength(1);
    });
  });
});
