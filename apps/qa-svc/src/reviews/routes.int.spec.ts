import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { buildService, listen, loadConfig, type BuiltService } from '@labelflow/service-kit';
import { as, buildTestService, eventually, freshSnowflake, refusal, type InProcessService } from '@labelflow/testing';
import { QaSvcConfig } from '../config';
import { qaService } from '../service';

const infra = inject('infra');

interface ReviewView {
  readonly taskId: string;
  readonly attempt: number;
  readonly projectId: string;
  readonly annotatorId?: string;
  readonly status: string;
  readonly reviewerId?: string | null;
  readonly taskCancelled?: boolean;
  readonly history?: readonly ReviewView[];
}
interface ReviewPage {
  readonly reviews: readonly ReviewView[];
  readonly nextCursor: string | null;
}

const project = randomUUID();
const elsewhere = randomUUID();
const manager = as.manager('mgr-1', project);
const reviewer = as.reviewer('rev-1', project);
const annotator = as.annotator('ann-2', project);
/** Labelled the tasks below and also reviews in the project: never her own work. */
const labellerWhoReviews = { user: 'ann-1', projects: { [project]: ['annotator', 'reviewer'] } } as const;
const stranger = as.reviewer('rev-elsewhere', elsewhere);
const decision = { decision: 'approve' } as const;

/**
 * qa-svc opens a review when label-svc's `LabelSubmitted` arrives: the tests plant it on the real
 * label topic, and the service's own consumer applies it.
 */
describe('qa-svc routes, answered in-process', () => {
  let svc: InProcessService<BuiltService<QaSvcConfig>>;
  /** Reviews opened in this order, all pending at first. */
  const [approved, rejected, untouched] = [freshSnowflake(), freshSnowflake(), freshSnowflake()];

  beforeAll(async () => {
    svc = await buildTestService(infra, 'qa-svc', (env) => buildService(qaService, loadConfig(QaSvcConfig, env)));
    await listen(svc.built);
    for (const taskId of [approved, rejected, untouched]) {
      await svc.plant('LabelSubmitted', { taskId, projectId: project, attempt: 1 }, { annotatorId: 'ann-1', annotations: [{ label: 'cat', confidence: 0.9 }] });
      // One at a time: the list tests rely on the order the reviews opened in.
      await eventually(async () => expect((await svc.http(manager).get(`/reviews/${taskId}`)).status).toBe(200));
    }
  });
  afterAll(async () => {
    await svc?.close();
  });

  describe('POST /reviews/:taskId', () => {
    it('answers 400 VALIDATION_FAILED for a malformed task id or an unknown decision', async () => {
      expect(refusal(await svc.http(reviewer).post('/reviews/abc', decision))).toEqual({ status: 400, code: 'VALIDATION_FAILED', paths: ['path.taskId'] });
      expect(refusal(await svc.http(reviewer).post(`/reviews/${approved}`, { decision: 'maybe' }))).toEqual({ status: 400, code: 'VALIDATION_FAILED', paths: ['body.decision'] });
    });

    it('answers 401 without a token', async () => {
      expect(refusal(await svc.http(null).post(`/reviews/${approved}`, decision))).toEqual({ status: 401, code: 'TOKEN_MISSING' });
    });

    it('answers 403 ACTOR_MISMATCH when the body names someone other than the caller', async () => {
      expect(refusal(await svc.http(reviewer).post(`/reviews/${approved}`, { ...decision, reviewerId: 'rev-2' }))).toEqual({ status: 403, code: 'ACTOR_MISMATCH' });
    });

    it('answers 404 REVIEW_NOT_FOUND (not yet) before the labels arrived, after the wait asked for', async () => {
      const unknown = freshSnowflake();
      expect(refusal(await svc.http(reviewer).post(`/reviews/${unknown}`, decision))).toEqual({ status: 404, code: 'REVIEW_NOT_FOUND' });
      const waited = await svc.http(reviewer).post(`/reviews/${unknown}`, decision, { prefer: 'wait=1' });
      expect(refusal(waited)).toEqual({ status: 404, code: 'REVIEW_NOT_FOUND' });
      expect(waited.headers.get('preference-applied')).toBe('wait=1');
    });

    it('answers 404 REVIEW_NOT_FOUND to a caller with no role in the project', async () => {
      expect(refusal(await svc.http(stranger).post(`/reviews/${approved}`, decision))).toEqual({ status: 404, code: 'REVIEW_NOT_FOUND' });
    });

    it('answers 403 FORBIDDEN to annotators and platform admins', async () => {
      for (const who of [annotator, as.admin()]) expect(refusal(await svc.http(who).post(`/reviews/${approved}`, decision))).toEqual({ status: 403, code: 'FORBIDDEN' });
    });

    it('answers 403 SELF_REVIEW to a reviewer who labelled the task', async () => {
      expect(refusal(await svc.http(labellerWhoReviews).post(`/reviews/${approved}`, decision))).toEqual({ status: 403, code: 'SELF_REVIEW' });
    });

    it('answers 400 REASON_REQUIRED to a rejection without a reason, and rejects with one', async () => {
      expect(refusal(await svc.http(reviewer).post(`/reviews/${rejected}`, { decision: 'reject' }))).toEqual({ status: 400, code: 'REASON_REQUIRED' });
      const answer = await svc.http(manager).post<ReviewView>(`/reviews/${rejected}`, { decision: 'reject', reason: 'the box misses the tail' });
      expect(answer.status).toBe(200);
      expect(answer.body).toMatchObject({ status: 'rejected', reviewerId: 'mgr-1', annotatorId: 'ann-1' });
    });

    it('approves for a reviewer, replays the answer for the same key and refuses a second decision', async () => {
      const key = randomUUID();
      const answer = await svc.http(reviewer).post<ReviewView>(`/reviews/${approved}`, { ...decision, attempt: 1 }, { 'idempotency-key': key });
      expect(answer.status).toBe(200);
      expect(answer.body).toMatchObject({ taskId: approved, attempt: 1, projectId: project, status: 'passed', reviewerId: 'rev-1', taskCancelled: false });
      // Reviewers judge without learning whose labels they read.
      expect(answer.body).not.toHaveProperty('annotatorId');
      expect(answer.body.history).toHaveLength(1);
      const replayed = await svc.http(reviewer).post<ReviewView>(`/reviews/${approved}`, { ...decision, attempt: 1 }, { 'idempotency-key': key });
      expect(replayed).toMatchObject({ status: 200, body: answer.body });
      expect(replayed.headers.get('idempotent-replayed')).toBe('true');
      expect(refusal(await svc.http(reviewer).post(`/reviews/${approved}`, decision))).toEqual({ status: 409, code: 'REVIEW_ALREADY_DECIDED' });
    });
  });

  describe('GET /reviews/:taskId', () => {
    it('shows the latest review and its history, naming people only to those who may see them', async () => {
      const toManager = await svc.http(manager).get<ReviewView>(`/reviews/${untouched}`);
      expect(toManager.status).toBe(200);
      expect(toManager.body).toMatchObject({ taskId: untouched, status: 'pending', annotatorId: 'ann-1', reviewerId: null, taskCancelled: false });
      expect(toManager.body.history).toHaveLength(1);
      const toAnnotator = await svc.http(annotator).get<ReviewView>(`/reviews/${untouched}`);
      expect(toAnnotator.status).toBe(200);
      expect(toAnnotator.body).not.toHaveProperty('annotatorId');
      expect((await svc.http(labellerWhoReviews).get<ReviewView>(`/reviews/${untouched}`)).body.annotatorId).toBe('ann-1');
    });

    it('answers 400 VALIDATION_FAILED for a malformed task id', async () => {
      expect(refusal(await svc.http(manager).get('/reviews/1.5'))).toEqual({ status: 400, code: 'VALIDATION_FAILED', paths: ['path.taskId'] });
    });

    it('answers 401 without a token', async () => {
      expect(refusal(await svc.http(null).get(`/reviews/${untouched}`))).toEqual({ status: 401, code: 'TOKEN_MISSING' });
    });

    it('answers 404 REVIEW_NOT_FOUND for a task with no review yet, and across tenants', async () => {
      expect(refusal(await svc.http(as.admin()).get(`/reviews/${freshSnowflake()}`))).toEqual({ status: 404, code: 'REVIEW_NOT_FOUND' });
      expect(refusal(await svc.http(stranger).get(`/reviews/${untouched}`))).toEqual({ status: 404, code: 'REVIEW_NOT_FOUND' });
    });
  });

  describe('GET /reviews', () => {
    it('pages through the reviews of the caller\'s projects in the order they opened', async () => {
      const first = await svc.http(reviewer).get<ReviewPage>('/reviews?limit=2');
      expect(first.status).toBe(200);
      expect(first.body.reviews.map((r) => r.taskId)).toEqual([approved, rejected]);
      const second = await svc.http(reviewer).get<ReviewPage>(`/reviews?limit=2&cursor=${first.body.nextCursor}`);
      expect(second.body.reviews.map((r) => r.taskId)).toEqual([untouched]);
      expect(second.body.nextCursor).toBeNull();
    });

    it('filters by status', async () => {
      const pending = await svc.http(manager).get<ReviewPage>('/reviews?status=pending');
      expect(pending.body.reviews.map((r) => r.taskId)).toEqual([untouched]);
    });

    it('lists nothing of projects the caller has no role in', async () => {
      expect((await svc.http(stranger).get<ReviewPage>('/reviews')).body).toEqual({ reviews: [], nextCursor: null });
    });

    it('answers 400 VALIDATION_FAILED for a bad filter or limit, and 400 CURSOR_INVALID for a cursor it did not issue', async () => {
      expect(refusal(await svc.http(manager).get('/reviews?status=open&limit=1001'))).toEqual({ status: 400, code: 'VALIDATION_FAILED', paths: ['query.status', 'query.limit'] });
      expect(refusal(await svc.http(manager).get('/reviews?cursor=e30'))).toEqual({ status: 400, code: 'CURSOR_INVALID' });
    });

    it('answers 401 without a token', async () => {
      expect(refusal(await svc.http(null).get('/reviews'))).toEqual({ status: 401, code: 'TOKEN_MISSING' });
    });
  });
});
