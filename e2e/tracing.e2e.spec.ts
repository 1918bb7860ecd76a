import { randomBytes } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import { gunzipSync } from 'node:zlib';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { as, eventually, startStack, type TestStack } from '@labelflow/testing';
import { createProject, key, REVIEWER, untilAccepted } from './saga';

/** One span as an OTLP/HTTP JSON export carries it, flattened with its service's name. */
interface ReceivedSpan {
  readonly service: string;
  readonly traceId: string;
  readonly spanId: string;
  readonly parentSpanId: string;
  readonly name: string;
  readonly kind: number;
  readonly attributes: Readonly<Record<string, unknown>>;
}

type OtlpValue = { stringValue?: string; intValue?: string | number; boolValue?: boolean; doubleValue?: number };
type OtlpAttribute = { key: string; value: OtlpValue };
interface OtlpExport {
  resourceSpans?: {
    resource?: { attributes?: OtlpAttribute[] };
    scopeSpans?: { spans?: { traceId: string; spanId: string; parentSpanId?: string; name: string; kind: number; attributes?: OtlpAttribute[] }[] }[];
  }[];
}

const valueOf = (v: OtlpValue): unknown => v.stringValue ?? (v.intValue !== undefined ? Number(v.intValue) : (v.boolValue ?? v.doubleValue));
const attributesOf = (list: OtlpAttribute[] = []) => Object.fromEntries(list.map((a) => [a.key, valueOf(a.value)]));

/**
 * A real OTLP/HTTP receiver, as a collector would be: it accepts POST /v1/traces in the JSON
 * encoding the services' exporter sends (gzip or not) and keeps every span.
 */
async function startOtlpReceiver(): Promise<{ readonly url: string; readonly spans: ReceivedSpan[]; close(): Promise<void> }> {
  const spans: ReceivedSpan[] = [];
  const server: Server = createServer((request, response) => {
    const chunks: Buffer[] = [];
    request.on('data', (chunk: Buffer) => chunks.push(chunk));
    request.on('end', () => {
      if (request.method !== 'POST' || request.url !== '/v1/traces') {
        response.writeHead(404).end();
        return;
      }
      try {
        const raw = Buffer.concat(chunks);
        const body = JSON.parse((request.headers['content-encoding'] === 'gzip' ? gunzipSync(raw) : raw).toString('utf8')) as OtlpExport;
        for (const resourceSpans of body.resourceSpans ?? []) {
          const service = String(attributesOf(resourceSpans.resource?.attributes)['service.name']);
          for (const scope of resourceSpans.scopeSpans ?? []) {
            for (const s of scope.spans ?? []) {
              spans.push({ service, traceId: s.traceId, spanId: s.spanId, parentSpanId: s.parentSpanId ?? '', name: s.name, kind: s.kind, attributes: attributesOf(s.attributes) });
            }
          }
        }
        response.writeHead(200, { 'content-type': 'application/json' }).end('{}');
      } catch (error) {
        response.writeHead(400, { 'content-type': 'application/json' }).end(JSON.stringify({ message: (error as Error).message }));
      }
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  return { url: `http://127.0.0.1:${port}`, spans, close: () => new Promise((resolve) => server.close(() => resolve())) };
}

// OTLP span kinds.
const SERVER = 2;
const PRODUCER = 4;
const CONSUMER = 5;

describe('traces through a real OTLP receiver', () => {
  let stack: TestStack;
  let receiver: Awaited<ReturnType<typeof startOtlpReceiver>>;
  beforeAll(async () => {
    receiver = await startOtlpReceiver();
    // Only the standard variables: the endpoint, and a short export delay so the test waits little.
    const otel = { OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url, OTEL_BSP_SCHEDULE_DELAY: '200' };
    stack = await startStack(inject('infra'), { 'task-svc': otel, 'label-svc': otel, 'qa-svc': otel, 'billing-svc': otel });
  });
  afterAll(async () => {
    await stack?.stop();
    await receiver?.close();
  });

  it('records one saga as one trace across the four services, with HTTP, transaction, publish and consume spans naming the task', async () => {
    const projectId = await createProject(stack, 10_000, 250);
    // The people driving the saga act through one traced client: each of their requests continues
    // its trace, so everything the saga does belongs to it.
    const traceId = randomBytes(16).toString('hex');
    const clientSpanId = randomBytes(8).toString('hex');
    const traced = { traceparent: `00-${traceId}-${clientSpanId}-01` };
    const annotator = as.annotator('annotator-trace', projectId);
    const wait = { ...traced, prefer: 'wait=20' };

    const created = await stack.http('task-svc').post<{ taskId: string }>('/tasks', { projectId, title: 'traced', dataUri: 's3://bucket/t.jpg' }, { ...key(), ...traced });
    expect(created.status, JSON.stringify(created.body)).toBe(201);
    const taskId = created.body.taskId;
    expect((await stack.http('task-svc', annotator).post(`/tasks/${taskId}/claim`, {}, traced)).status).toBe(200);
    // One key per command, the same on each "not yet" retry; anything else fails at once.
    const labelsKey = key();
    await untilAccepted(() => stack.http('label-svc', annotator).post(`/tasks/${taskId}/labels`, { annotations: [{ label: 'cat', confidence: 0.9 }] }, { ...labelsKey, ...wait }), 201, { status: 409, code: 'ASSIGNMENT_UNKNOWN' });
    const reviewKey = key();
    await untilAccepted(() => stack.http('qa-svc', as.reviewer(REVIEWER, projectId)).post(`/reviews/${taskId}`, { decision: 'approve' }, { ...reviewKey, ...wait }), 200, { status: 404, code: 'REVIEW_NOT_FOUND' });
    await eventually(async () => {
      const res = await stack.http('task-svc').get<{ status: string }>(`/tasks/${taskId}`, traced);
      expect(res.body.status).toBe('completed');
    }, { timeoutMs: 60_000 });

    // The last events (TaskCompleted, the reactions to BillingCompleted) are exported shortly after,
    // and each service exports on its own timer: a service's spans may reach the receiver after a
    // later service's. So the whole trace is checked again until it is complete or the time is up.
    const ofTask = (s: ReceivedSpan) => s.attributes['labelflow.task_id'] === taskId;
    const has = (service: string, kind: number, name: string) => receiver.spans.some((s) => ofTask(s) && s.service === service && s.kind === kind && s.name === name);
    await eventually(
      () => {
        expect(has('task-svc', PRODUCER, 'publish TaskCompleted')).toBe(true);
        expect(has('label-svc', CONSUMER, 'process BillingCompleted')).toBe(true);
        expect(has('qa-svc', CONSUMER, 'process BillingCompleted')).toBe(true);
        const saga = receiver.spans.filter(ofTask);
        // Every span that names the task is in the one trace.
        expect([...new Set(saga.map((s) => s.traceId))]).toEqual([traceId]);
        expect(new Set(saga.map((s) => s.service))).toEqual(new Set(['task-svc', 'label-svc', 'qa-svc', 'billing-svc']));

        // Each kind of span exists, with the task id, where the saga puts it.
        expect(has('task-svc', SERVER, 'POST /tasks')).toBe(true);
        expect(has('task-svc', SERVER, 'POST /tasks/:taskId/claim')).toBe(true);
        expect(has('label-svc', SERVER, 'POST /tasks/:taskId/labels')).toBe(true);
        expect(has('qa-svc', SERVER, 'POST /reviews/:taskId')).toBe(true);
        expect(has('label-svc', CONSUMER, 'process TaskAssigned')).toBe(true);
        expect(has('qa-svc', CONSUMER, 'process LabelSubmitted')).toBe(true);
        expect(has('qa-svc', PRODUCER, 'publish QaStarted')).toBe(true);
        expect(has('billing-svc', CONSUMER, 'process QaPassed')).toBe(true);
        expect(has('billing-svc', PRODUCER, 'publish BillingCompleted')).toBe(true);
        expect(has('task-svc', CONSUMER, 'process BillingCompleted')).toBe(true);
        for (const service of ['task-svc', 'label-svc', 'qa-svc']) expect(saga.some((s) => s.service === service && s.name === 'db transaction'), `${service} transaction span`).toBe(true);
        const billing = saga.find((s) => s.service === 'billing-svc' && s.name === 'publish BillingCompleted');
        expect(billing?.attributes).toMatchObject({ 'labelflow.project_id': projectId, 'labelflow.attempt': 1, 'labelflow.event_type': 'BillingCompleted' });

        // One tree: in the trace, every span's parent was exported too, but for the client's own span.
        const trace = receiver.spans.filter((s) => s.traceId === traceId);
        const ids = new Set(trace.map((s) => s.spanId));
        const orphans = trace.filter((s) => !ids.has(s.parentSpanId) && s.parentSpanId !== clientSpanId);
        expect(orphans.map((s) => `${s.service} ${s.name}`)).toEqual([]);
        // The billing-svc consumer hangs under qa-svc's publish of QaPassed: the trace crossed Kafka.
        const qaPassedConsumed = trace.find((s) => s.service === 'billing-svc' && s.name === 'process QaPassed');
        const parent = trace.find((s) => s.spanId === qaPassedConsumed?.parentSpanId);
        expect(parent).toMatchObject({ service: 'qa-svc', name: 'publish QaPassed', kind: PRODUCER });
      },
      { timeoutMs: 30_000, intervalMs: 250 },
    );
  });
});
