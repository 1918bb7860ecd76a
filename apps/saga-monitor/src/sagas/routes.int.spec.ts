import { createHash, randomUUID } from 'node:crypto';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { topicName, topicOf, type DomainEvent } from '@labelflow/contracts';
import { buildService, loadConfig, type BuiltService } from '@labelflow/service-kit';
import { as, buildTestService, eventually, freshSnowflake, metricValue, produceRaw, refusal, type InProcessService } from '@labelflow/testing';
import { SagaMonitorConfig } from '../config';
import { runSagaMonitor } from '../run';
import { sagaMonitor } from '../service';

const infra = inject('infra');

interface TimelineView {
  readonly taskId: string;
  readonly taskNumber: string | null;
  readonly outcome: string | null;
  readonly duplicatesDropped: number;
  readonly compensations: number;
  readonly attempts: readonly { attempt: number; ended: string | null }[];
  readonly events: readonly { type: string; attempt: number; service: string; kind: string; details: string; traceId: string | null; traceUrl: string | null }[];
  readonly watches: readonly { step: string; attempt: number; alerting: boolean }[];
  readonly deadLetters: readonly { service: string; code: string; eventId: string | null; eventType: string | null; projectId?: string | null; reason?: string; source?: string | null }[];
}
interface AlertsView {
  readonly alerts: readonly { taskId: string; step: string; attempt: number; alerting: boolean }[];
}

const project = randomUUID();
const elsewhere = randomUUID();
const manager = as.manager('mgr-1', project);
const owner = as.owner('own-1', project);
const annotator = as.annotator('ann-1', project);
const stranger = as.owner('own-elsewhere', elsewhere);
const traceId = '4bf92f3577b34da6a3ce929d0e0e4736';

/**
 * The monitor consumes the four real topics under the test's prefix: the tests plant each event as
 * its producing service would publish it, and read the timeline back through the routes.
 */
describe('saga-monitor routes and watchdog, answered in-process', () => {
  let svc: InProcessService<BuiltService<SagaMonitorConfig>>;
  const reworked = freshSnowflake();
  const stuck = freshSnowflake();
  const unrefunded = freshSnowflake();
  const traced = freshSnowflake();

  const plantAs = (taskId: string, attempt: number) => ({ taskId, projectId: project, attempt });
  /** Publishes an event again, byte for byte, with a traceparent: what a relay resend looks like. */
  const republish = (event: DomainEvent, headers: Record<string, string> = {}) =>
    produceRaw(infra.kafkaBrokers, topicName(svc.prefix, topicOf(event.type)), [{ key: event.taskId, value: JSON.stringify(event), headers: { 'event-type': event.type, 'event-version': String(event.version), ...headers } }]);
  const timeline = async (taskId: string) => (await svc.http(manager).get<TimelineView>(`/sagas/${taskId}`)).body;
  const metrics = async () => (await svc.http().get<string>('/metrics')).body;

  beforeAll(async () => {
    svc = await buildTestService(infra, 'saga-monitor', (env) => buildService(sagaMonitor, loadConfig(SagaMonitorConfig, env)), {
      SAGA_DEADLINE_QA_STARTED_MS: '1000',
      SAGA_DEADLINE_REFUND_MS: '1000',
      SWEEP_INTERVAL_MS: '100',
      MONITOR_NOTICE_POLL_MS: '50',
      JAEGER_URL: 'http://jaeger.test:16686/',
    });
    await runSagaMonitor(svc.built);

    // A saga rejected once and reworked: the second attempt is approved and billed.
    await svc.plant('TaskCreated', plantAs(reworked, 1), { title: 'is there a cat?', dataUri: 's3://b/1.jpg', taskNumber: 'MON-7', createdBy: 'mgr-1' });
    await svc.plant('TaskAssigned', plantAs(reworked, 1), { annotatorId: 'ann-1' });
    const labels = await svc.plant('LabelSubmitted', plantAs(reworked, 1), { annotatorId: 'ann-1', annotations: [{ label: 'cat', confidence: 0.9 }] });
    await svc.plant('QaStarted', plantAs(reworked, 1), { annotatorId: 'ann-1' });
    await svc.plant('QaRejected', plantAs(reworked, 1), { annotatorId: 'ann-1', reviewerId: 'rev-1', reason: 'that is a dog' });
    await svc.plant('TaskReopened', plantAs(reworked, 2), { reason: 'QA_REJECTED', previousAttempt: 1, previousAnnotatorId: 'ann-1' });
    await svc.plant('TaskAssigned', plantAs(reworked, 2), { annotatorId: 'ann-1' });
    await svc.plant('LabelSubmitted', plantAs(reworked, 2), { annotatorId: 'ann-1', annotations: [{ label: 'dog', confidence: 0.9 }] });
    await svc.plant('QaStarted', plantAs(reworked, 2), { annotatorId: 'ann-1' });
    await svc.plant('QaPassed', plantAs(reworked, 2), { annotatorId: 'ann-1', reviewerId: 'rev-1' });
    await svc.plant('BillingCompleted', plantAs(reworked, 2), { annotatorId: 'ann-1', amount: 300, approvedBy: 'rev-1' });
    const completed = await svc.plant('TaskCompleted', plantAs(reworked, 2), { annotatorId: 'ann-1' });
    // The labels delivered a second time, and the completion again with a trace.
    await republish(labels);
    await republish(completed, { traceparent: `00-${traceId}-00f067aa0ba902b7-01` });
    // Another task's review opening, sent with the trace it travelled in.
    await republish({ ...labels, id: freshSnowflake(), taskId: traced, type: 'QaStarted', version: 1, producer: 'qa-svc', payload: { annotatorId: 'ann-1' } } as DomainEvent, { traceparent: `00-${traceId}-00f067aa0ba902b7-01` });
    // label-svc could not read a message of the task: its consumer dead-lettered it, with V8's
    // error quoting the NUL it choked on, which PostgreSQL would refuse as text.
    await produceRaw(infra.kafkaBrokers, `${svc.prefix}.label-svc.dlq`, [{
      key: reworked,
      value: '{"not": "an event"',
      headers: { 'dlq-error-code': 'DECODE_FAILED', 'dlq-error-message': 'not JSON: \u0000', 'dlq-source-topic': `${svc.prefix}.task-events`, 'dlq-source-partition': '0', 'dlq-source-offset': '41', 'dlq-consumer-group': `${svc.prefix}.label-svc`, 'dlq-failed-at': new Date().toISOString() },
    }]);
    // And the monitor's own consumer could not record one: its timeline must say so too.
    await produceRaw(infra.kafkaBrokers, `${svc.prefix}.saga-monitor.dlq`, [{
      key: reworked,
      value: '{"not": "an event either"',
      headers: { 'dlq-error-code': 'DECODE_FAILED', 'dlq-error-message': 'not JSON', 'dlq-source-topic': `${svc.prefix}.qa-events`, 'dlq-source-partition': '2', 'dlq-source-offset': '7', 'dlq-consumer-group': `${svc.prefix}.saga-monitor`, 'dlq-failed-at': new Date().toISOString() },
    }]);
    // The duplicates say the label and task topics were read to their end; the qa and billing
    // topics are read in no fixed order with them, so the saga's twelve events are waited for too.
    await eventually(async () => {
      const saga = await timeline(reworked);
      expect(saga.duplicatesDropped).toBe(2);
      expect(saga.events).toHaveLength(12);
    });
  });
  afterAll(async () => {
    await svc?.close();
  });

  describe('GET /sagas/:taskId', () => {
    it('lists every event of the saga across the four services in time order, with its attempts and compensations', async () => {
      const saga = await timeline(reworked);
      expect(saga.events.map((e) => [e.type, e.attempt])).toEqual([
        ['TaskCreated', 1], ['TaskAssigned', 1], ['LabelSubmitted', 1], ['QaStarted', 1], ['QaRejected', 1],
        ['TaskReopened', 2], ['TaskAssigned', 2], ['LabelSubmitted', 2], ['QaStarted', 2], ['QaPassed', 2], ['BillingCompleted', 2], ['TaskCompleted', 2],
      ]);
      expect(new Set(saga.events.map((e) => e.service))).toEqual(new Set(['task-svc', 'label-svc', 'qa-svc', 'billing-svc']));
      expect(saga.attempts).toEqual([expect.objectContaining({ attempt: 1, ended: 'reopened: QA_REJECTED' }), expect.objectContaining({ attempt: 2, ended: 'TaskCompleted' })]);
      expect(saga).toMatchObject({ taskNumber: 'MON-7', outcome: 'completed', compensations: 1, watches: [] });
      expect(saga.events.find((e) => e.type === 'QaRejected')).toMatchObject({ kind: 'rejection', details: 'rejected by rev-1, "that is a dog"' });
    });

    it('counts the duplicates it dropped and keeps the first delivery of each event', async () => {
      const saga = await timeline(reworked);
      expect(saga.duplicatesDropped).toBe(2);
      expect(saga.events.filter((e) => e.type === 'LabelSubmitted')).toHaveLength(2);
    });

    it('shows what a service or the monitor itself dead-lettered of the task, read from their dead-letter topics', async () => {
      const saga = await eventually(async () => {
        const found = await timeline(reworked);
        expect(found.deadLetters).toHaveLength(2);
        return found;
      });
      expect(new Set(saga.deadLetters.map((d) => d.service))).toEqual(new Set(['label-svc', 'saga-monitor']));
      // The consumer's error text and the DLQ coordinates are for the admins who replay it.
      expect(saga.deadLetters[0]).not.toHaveProperty('reason');
      expect(saga.deadLetters[0]).not.toHaveProperty('source');
      // The follower of the dead-letter topics reports under names of its own, beside the main consumer.
      const text = await metrics();
      expect(metricValue(text, 'saga_monitor_dead_letter_follower_running', {})).toBe(1);
      // Both crash series from the start, so DeadLetterFollowerCrashLooping sees a first crash.
      expect(text).toMatch(/^saga_monitor_dead_letter_follower_crashes_total\{[^}]*restart="kafkajs"[^}]*\} 0$/m);
      expect(text).toMatch(/^saga_monitor_dead_letter_follower_crashes_total\{[^}]*restart="loop"[^}]*\} 0$/m);
      // Counted by the service that dead-lettered, under a label of its own: the process's own
      // service="saga-monitor" stays on every series.
      expect(metricValue(text, 'saga_monitor_dead_letters_recorded_total', { source_service: 'label-svc', service: 'saga-monitor' })).toBe(1);
      expect(metricValue(text, 'saga_monitor_dead_letters_recorded_total', { source_service: 'saga-monitor', service: 'saga-monitor' })).toBe(1);
      const asAdmin = (await svc.http(as.admin()).get<TimelineView>(`/sagas/${reworked}`)).body;
      expect(asAdmin.deadLetters).toEqual(
        expect.arrayContaining([
          expect.objectContaining({ service: 'label-svc', code: 'DECODE_FAILED', reason: 'not JSON: \uFFFD', source: `${svc.prefix}.task-events/0@41` }),
          expect.objectContaining({ service: 'saga-monitor', code: 'DECODE_FAILED', source: `${svc.prefix}.qa-events/2@7` }),
        ]),
      );
    });

    it('shows a project only the dead letters whose body names it or no project, and what a sender chose only when it names it', async () => {
      const letter = (id: string, type: string, projectId: string) => ({
        key: traced,
        value: JSON.stringify({ id, type, taskId: traced, projectId, payload: 'unreadable' }),
        headers: { 'dlq-error-code': 'SCHEMA_INVALID', 'dlq-error-message': 'payload: expected object', 'dlq-source-topic': `${svc.prefix}.label-events`, 'dlq-source-partition': '0', 'dlq-source-offset': '1', 'dlq-failed-at': new Date().toISOString() },
      });
      const ours = freshSnowflake();
      // Someone who can write to a topic keys a letter with another project's task, or names the
      // task's own project with a type and an id of their choosing.
      await produceRaw(infra.kafkaBrokers, `${svc.prefix}.label-svc.dlq`, [
        letter('forged-1', 'Click here to claim your payout', elsewhere),
        letter(ours, 'LabelSubmitted', project),
        letter('forged-2', 'Your payout is waiting at evil.example', project),
      ]);
      const asAdmin = await eventually(async () => {
        const found = (await svc.http(as.admin()).get<TimelineView>(`/sagas/${traced}`)).body;
        expect(found.deadLetters).toHaveLength(3);
        return found;
      });
      expect(asAdmin.deadLetters).toEqual(expect.arrayContaining([expect.objectContaining({ eventType: 'Click here to claim your payout', projectId: elsewhere })]));
      const asManager = await timeline(traced);
      expect(asManager.deadLetters.map((d) => [d.service, d.eventId, d.eventType, d.code])).toEqual([
        ['label-svc', ours, 'LabelSubmitted', 'SCHEMA_INVALID'],
        ['label-svc', null, null, 'SCHEMA_INVALID'],
      ]);
      // A letter whose body names no project shows without what its sender chose.
      expect((await timeline(reworked)).deadLetters.map((d) => [d.eventType, d.eventId])).toEqual([
        [null, null],
        [null, null],
      ]);
    });

    it('answers 401 without a token, 403 to an annotator of the project, 404 to another project and to an unknown task', async () => {
      expect(refusal(await svc.http(null).get(`/sagas/${reworked}`))).toMatchObject({ status: 401, code: 'TOKEN_MISSING' });
      expect(refusal(await svc.http(annotator).get(`/sagas/${reworked}`))).toMatchObject({ status: 403, code: 'FORBIDDEN' });
      expect(refusal(await svc.http(stranger).get(`/sagas/${reworked}`))).toMatchObject({ status: 404, code: 'SAGA_NOT_FOUND' });
      expect(refusal(await svc.http(owner).get(`/sagas/${freshSnowflake()}`))).toMatchObject({ status: 404, code: 'SAGA_NOT_FOUND' });
      expect(refusal(await svc.http(owner).get('/sagas/not-a-task'))).toEqual({ status: 400, code: 'VALIDATION_FAILED', paths: ['path.taskId'] });
    });
  });

  describe('GET /sagas?search=', () => {
    it('finds a saga by task id and by task number in any case, only in the caller’s projects', async () => {
      for (const search of [reworked, 'MON-7', 'mon-7']) {
        const found = await svc.http(manager).get<{ sagas: { taskId: string }[] }>(`/sagas?search=${search}`);
        expect(found.body.sagas.map((s) => s.taskId)).toEqual([reworked]);
      }
      expect((await svc.http(stranger).get<{ sagas: unknown[] }>('/sagas?search=MON-7')).body.sagas).toEqual([]);
      expect((await svc.http(annotator).get<{ sagas: unknown[] }>('/sagas?search=MON-7')).body.sagas).toEqual([]);
    });

    it('answers a search with a NUL, which PostgreSQL cannot store, with a 400 naming the field', async () => {
      for (const search of ['%00', 'a%00b']) {
        const refused = await svc.http(manager).get<{ error: { code: string; message: string } }>(`/sagas?search=${search}`);
        expect(refused.status).toBe(400);
        expect(refused.body.error.message).toContain('search');
      }
    });
  });

  describe('the watchdog', () => {
    it('alerts when QaStarted does not follow LabelSubmitted in time, and clears the alert when it arrives', async () => {
      // The reworked saga planted above may itself have taken longer than the 1 s deadline between
      // a LabelSubmitted and its QaStarted (each plant opens a producer): such an alert fires and
      // resolves on its own. Counted from once that is over, whichever way it went: its watches
      // closed, no notice left to take, and every alert that fired resolved.
      let base = { fired: 0, resolved: 0 };
      const db = new pg.Client({ connectionString: svc.databaseUrl });
      await db.connect();
      await eventually(async () => {
        expect((await timeline(reworked)).watches).toEqual([]);
        expect((await db.query<{ n: number }>('SELECT count(*)::int AS n FROM saga_notices')).rows[0]!.n).toBe(0);
        const text = await metrics();
        const fired = metricValue(text, 'saga_alerts_total', { step: 'qa_started' });
        const resolved = metricValue(text, 'saga_alerts_resolved_total', { step: 'qa_started', cause: 'arrived' });
        expect(metricValue(text, 'saga_alerts_active', { step: 'qa_started' })).toBe(0);
        expect(fired).toBe(resolved);
        base = { fired, resolved };
      }).finally(() => db.end());
      await svc.plant('LabelSubmitted', plantAs(stuck, 1), { annotatorId: 'ann-1', annotations: [{ label: 'cat', confidence: 0.9 }] });
      await eventually(async () => {
        const { alerts } = (await svc.http(manager).get<AlertsView>('/sagas/alerts')).body;
        expect(alerts).toEqual([expect.objectContaining({ taskId: stuck, step: 'qa_started', attempt: 1, alerting: true })]);
        // The gauge is read from the database on each drain, the counter from the notices it took:
        // a sweep committed between the two shows in the gauge one drain before the counter.
        const text = await metrics();
        expect(metricValue(text, 'saga_alerts_active', { step: 'qa_started' })).toBe(1);
        expect(metricValue(text, 'saga_alerts_total', { step: 'qa_started' })).toBe(base.fired + 1);
      });
      expect((await timeline(stuck)).watches).toEqual([expect.objectContaining({ step: 'qa_started', attempt: 1, alerting: true })]);
      expect((await svc.http(stranger).get<AlertsView>('/sagas/alerts')).body.alerts).toEqual([]);

      await svc.plant('QaStarted', plantAs(stuck, 1), { annotatorId: 'ann-1' });
      await eventually(async () => {
        expect((await svc.http(manager).get<AlertsView>('/sagas/alerts')).body.alerts).toEqual([]);
        const text = await metrics();
        expect(metricValue(text, 'saga_alerts_active', { step: 'qa_started' })).toBe(0);
        expect(metricValue(text, 'saga_alerts_resolved_total', { step: 'qa_started', cause: 'arrived' })).toBe(base.resolved + 1);
      });
    });

    it('alerts when a cancelled task keeps its billing unrefunded, and clears the alert when the refund arrives', async () => {
      await svc.plant('QaPassed', plantAs(unrefunded, 1), { annotatorId: 'ann-1', reviewerId: 'rev-1' });
      await svc.plant('BillingCompleted', plantAs(unrefunded, 1), { annotatorId: 'ann-1', amount: 300, approvedBy: 'rev-1' });
      // Cancelled while billed, before task-svc completed it (the other tests count completions).
      await svc.plant('TaskCancelled', plantAs(unrefunded, 1), { reason: 'duplicate of another task', cancelledBy: 'mgr-1', previousStatus: 'approved' });
      await eventually(async () => {
        const { alerts } = (await svc.http(manager).get<AlertsView>('/sagas/alerts')).body;
        expect(alerts.filter((a) => a.taskId === unrefunded)).toEqual([expect.objectContaining({ step: 'refund', attempt: 1, alerting: true })]);
      });
      await svc.plant('BillingRefunded', plantAs(unrefunded, 1), { annotatorId: 'ann-1', amount: 300, reason: 'TASK_CANCELLED' });
      await eventually(async () => {
        expect((await svc.http(manager).get<AlertsView>('/sagas/alerts')).body.alerts.filter((a) => a.taskId === unrefunded)).toEqual([]);
        expect(metricValue(await metrics(), 'saga_alerts_resolved_total', { step: 'refund', cause: 'arrived' })).toBe(1);
      });
    });

    it('lets a platform admin dismiss an alert whose event will never come, which resolves it, and no one else', async () => {
      const abandoned = freshSnowflake();
      await svc.plant('LabelSubmitted', plantAs(abandoned, 1), { annotatorId: 'ann-1', annotations: [{ label: 'cat', confidence: 0.9 }] });
      await eventually(async () => {
        const { alerts } = (await svc.http(manager).get<AlertsView>('/sagas/alerts')).body;
        expect(alerts.filter((a) => a.taskId === abandoned)).toEqual([expect.objectContaining({ step: 'qa_started', attempt: 1, alerting: true })]);
      });
      const path = `/sagas/${abandoned}/alerts/qa_started/1/dismiss`;
      expect(refusal(await svc.http(manager).post(path, {}))).toMatchObject({ status: 403, code: 'FORBIDDEN' });
      expect(refusal(await svc.http(as.admin()).post(`/sagas/${abandoned}/alerts/qa_started/2/dismiss`, {}))).toMatchObject({ status: 404, code: 'WATCH_NOT_FOUND' });
      expect(refusal(await svc.http(as.admin()).post(`/sagas/${abandoned}/alerts/lunch/1/dismiss`, {}))).toMatchObject({ status: 400, code: 'VALIDATION_FAILED' });
      const dismissed = await svc.http(as.admin()).post(path, {});
      expect(dismissed.status, JSON.stringify(dismissed.body)).toBe(200);
      expect(dismissed.body).toEqual({ dismissed: { taskId: abandoned, step: 'qa_started', attempt: 1 } });
      expect((await timeline(abandoned)).watches).toEqual([]);
      await eventually(async () => {
        expect((await svc.http(manager).get<AlertsView>('/sagas/alerts')).body.alerts.filter((a) => a.taskId === abandoned)).toEqual([]);
        expect(metricValue(await metrics(), 'saga_alerts_resolved_total', { step: 'qa_started', cause: 'dismissed' })).toBe(1);
      });
      // Already closed: a second dismissal finds nothing to end.
      expect(refusal(await svc.http(as.admin()).post(path, {}))).toMatchObject({ status: 404, code: 'WATCH_NOT_FOUND' });
    });

    it('times every step of the saga and counts its outcome', async () => {
      // Latencies reach the metrics through notices drained on a timer, after the consumer
      // committed them, and the four topics arrive in no fixed order between them.
      await eventually(async () => {
        const text = await metrics();
        for (const [from, to] of [['created', 'assigned'], ['reopened', 'assigned'], ['assigned', 'labelled'], ['labelled', 'qa_started'], ['qa_started', 'decided'], ['decided', 'billed'], ['billed', 'completed']]) {
          expect(metricValue(text, 'saga_step_seconds_count', { from: from!, to: to! }), `${from} → ${to}`).toBeGreaterThanOrEqual(1);
        }
        expect(metricValue(text, 'saga_outcomes_total', { outcome: 'completed' })).toBe(1);
      });
    });
  });

  describe('the timeline page', () => {
    it('is served without a token and holds no data', async () => {
      const page = await svc.http(null).get<string>('/ui');
      expect(page.status).toBe(200);
      expect(page.headers.get('content-type')).toMatch(/^text\/html/);
      expect(page.body).toContain('id="timeline"');
      expect(page.body).not.toContain(reworked);
    });

    it('allows only its own inline script, by hash, and calls to its own origin', async () => {
      const page = await svc.http(null).get<string>('/ui');
      const policy = page.headers.get('content-security-policy') ?? '';
      const script = /<script>([\s\S]*?)<\/script>/.exec(page.body)?.[1] ?? '';
      expect(policy).toContain(`script-src 'sha256-${createHash('sha256').update(script).digest('base64')}'`);
      expect(policy).toContain("default-src 'none'");
      expect(policy).toContain("connect-src 'self'");
      expect(policy).toContain("frame-ancestors 'none'");
    });

    it('links an event to the trace it travelled in, in Jaeger', async () => {
      const saga = await eventually(async () => {
        const found = await svc.http(manager).get<TimelineView>(`/sagas/${traced}`);
        expect(found.status).toBe(200);
        return found.body;
      });
      expect(saga.events.map((e) => [e.type, e.traceId, e.traceUrl])).toEqual([['QaStarted', traceId, `http://jaeger.test:16686/trace/${traceId}`]]);
    });
  });
});
