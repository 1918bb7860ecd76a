import { Writable } from 'node:stream';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { context, propagation, trace } from '@opentelemetry/api';
import { InMemorySpanExporter, type ReadableSpan } from '@opentelemetry/sdk-trace-base';
import { TelemetryErrors } from './errors';
import { createLogger } from './logger';
import {
  consumedTraceHeaders,
  continuedTraceHeaders,
  currentTraceHeaders,
  installTracePropagation,
  runLinked,
  startSpan,
  tracingEnabled,
  withChildSpan,
  withSpan,
  withTraceContext,
} from './tracing';
import { startTracing, tracingSettings, type Tracing } from './tracing-sdk';

const logger = createLogger({ service: 'tracing-test', level: 'silent' });
const TRACE_ID = '4bf92f3577b34da6a3ce929d0e0e4736';
const traceparent = `00-${TRACE_ID}-00f067aa0ba902b7-01`;
const ENDPOINT = { OTEL_EXPORTER_OTLP_ENDPOINT: 'http://127.0.0.1:4318' };

beforeAll(() => installTracePropagation());

describe('telemetry: tracingSettings', () => {
  it('is off when no OTLP endpoint is named, whatever else is set', () => {
    expect(tracingSettings('task-svc', {})).toMatchObject({ enabled: false });
    expect(tracingSettings('task-svc', { OTEL_SERVICE_NAME: 'x', OTEL_TRACES_SAMPLER: 'always_on', OTEL_EXPORTER_OTLP_ENDPOINT: '  ' })).toMatchObject({ enabled: false });
  });

  it('joins /v1/traces to the general endpoint and takes the traces endpoint as the full URL', () => {
    expect(tracingSettings('task-svc', { OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318/' })).toEqual({ enabled: true, tracesUrl: 'http://collector:4318/v1/traces', serviceName: 'task-svc', warnings: [] });
    expect(tracingSettings('task-svc', { ...ENDPOINT, OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'https://traces.example/otlp' })).toMatchObject({ tracesUrl: 'https://traces.example/otlp' });
  });

  it('names the service after OTEL_SERVICE_NAME when set, else after the service', () => {
    expect(tracingSettings('qa-svc', { ...ENDPOINT, OTEL_SERVICE_NAME: 'qa-canary' })).toMatchObject({ serviceName: 'qa-canary' });
    expect(tracingSettings('qa-svc', ENDPOINT)).toMatchObject({ serviceName: 'qa-svc' });
  });

  it('stays off when the SDK is disabled or another exporter is asked for', () => {
    expect(tracingSettings('task-svc', { ...ENDPOINT, OTEL_SDK_DISABLED: 'true' })).toMatchObject({ enabled: false, reason: 'OTEL_SDK_DISABLED=true' });
    expect(tracingSettings('task-svc', { ...ENDPOINT, OTEL_TRACES_EXPORTER: 'none' })).toMatchObject({ enabled: false });
    expect(tracingSettings('task-svc', { ...ENDPOINT, OTEL_TRACES_EXPORTER: 'otlp' })).toMatchObject({ enabled: true });
  });

  it('refuses an endpoint that is not an http(s) URL with TELEMETRY_CONFIG_INVALID naming the variable', () => {
    expect(() => tracingSettings('task-svc', { OTEL_EXPORTER_OTLP_ENDPOINT: 'collector:4318' })).toThrow(expect.objectContaining({ code: TelemetryErrors.CONFIG_INVALID, message: expect.stringContaining('OTEL_EXPORTER_OTLP_ENDPOINT') }));
  });

  it('warns that a protocol other than http/json is not what it sends', () => {
    const settings = tracingSettings('task-svc', { ...ENDPOINT, OTEL_EXPORTER_OTLP_PROTOCOL: 'grpc' });
    expect(settings.enabled && settings.warnings).toEqual([expect.stringContaining('http/json')]);
    expect(tracingSettings('task-svc', { ...ENDPOINT, OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json' })).toMatchObject({ warnings: [] });
  });
});

describe('telemetry: tracing off', () => {
  it('registers no SDK, starts no span and still passes an incoming traceparent on', async () => {
    const tracing = startTracing({ service: 'task-svc', logger, env: {} });

    expect(tracing.enabled).toBe(false);
    expect(tracingEnabled()).toBe(false);
    // The global API still hands out its no-op tracer: nothing was registered.
    expect(trace.getTracer('any').startSpan('x').isRecording()).toBe(false);
    expect(startSpan('GET /tasks', { kind: 'server', headers: { traceparent } })).toBeUndefined();
    await withChildSpan('db transaction', {}, async (span) => expect(span).toBeUndefined());
    const carried = await withSpan('consume QaPassed', 'consumer', { traceparent }, {}, async () => currentTraceHeaders());
    expect(carried.traceparent).toContain(TRACE_ID);
    expect(withTraceContext({ traceparent }, () => currentTraceHeaders()).traceparent).toBe(traceparent);
    await tracing.shutdown();
  });
});

describe('telemetry: tracing on', () => {
  let tracing: Tracing | undefined;
  let exporter = new InMemorySpanExporter();
  // A fresh exporter each time: a shut-down SDK shuts its exporter down with it.
  const start = () => {
    exporter = new InMemorySpanExporter();
    tracing = startTracing({ service: 'label-svc', logger, env: ENDPOINT, exporter });
    return tracing;
  };
  const finished = async (): Promise<ReadableSpan[]> => {
    await tracing?.flush();
    return exporter.getFinishedSpans();
  };
  afterEach(async () => {
    await tracing?.shutdown();
    tracing = undefined;
  });

  it('names the trace and span a log line was written in, and none outside a span', async () => {
    start();
    const lines: Record<string, unknown>[] = [];
    const sink = new Writable({ write: (chunk: Buffer, _enc, done) => (lines.push(JSON.parse(chunk.toString()) as Record<string, unknown>), done()) });
    const log = createLogger({ service: 'label-svc', destination: sink });
    const span = startSpan('process TaskAssigned', { kind: 'consumer', headers: { traceparent } })!;
    await span.run(async () => log.warn('processing failed; retrying'));
    log.info('outside');
    span.end();
    const [recorded] = await finished();
    expect(lines[0]).toMatchObject({ msg: 'processing failed; retrying', trace_id: TRACE_ID, span_id: recorded!.spanContext().spanId });
    expect(lines[1]).not.toHaveProperty('trace_id');
  });

  it('continues the carried trace and puts the saga facts in attributes and baggage', async () => {
    start();
    const span = startSpan('process TaskAssigned', { kind: 'consumer', headers: { traceparent }, facts: { taskId: '42', projectId: 'p-1', attempt: 2, eventType: 'TaskAssigned' } });
    const headers = span!.headers();
    span!.end();

    expect(headers.traceparent).toContain(TRACE_ID);
    expect(decodeURIComponent(headers.baggage!)).toContain('labelflow.task_id=42');
    expect(decodeURIComponent(headers.baggage!)).toContain('labelflow.attempt=2');
    const [recorded] = await finished();
    expect(recorded!.spanContext().traceId).toBe(TRACE_ID);
    expect(recorded!.parentSpanContext?.spanId).toBe('00f067aa0ba902b7');
    expect(recorded!.attributes).toMatchObject({ 'labelflow.task_id': '42', 'labelflow.project_id': 'p-1', 'labelflow.attempt': 2, 'labelflow.event_type': 'TaskAssigned' });
  });

  it('gives a child span the facts of the baggage it runs in, learnt after its parent started', async () => {
    start();
    const request = startSpan('POST /tasks/:taskId/claim', { kind: 'server', headers: { traceparent } })!;
    request.annotate({ taskId: '7' });
    await request.run(() => withChildSpan('db transaction', {}, async () => undefined));
    request.end();

    const spans = await finished();
    const tx = spans.find((s) => s.name === 'db transaction');
    expect(tx?.attributes['labelflow.task_id']).toBe('7');
    expect(tx?.spanContext().traceId).toBe(TRACE_ID);
  });

  it('opens no span for a transaction nothing traced asked for', async () => {
    start();
    await withChildSpan('db transaction', {}, async (span) => expect(span).toBeUndefined());
    expect(await finished()).toEqual([]);
  });

  it('roots a transaction for several deliveries in no trace of theirs and links it to each', async () => {
    start();
    const a = startSpan('process A', { kind: 'consumer', headers: { traceparent }, facts: { taskId: '1' } })!;
    const b = startSpan('process B', { kind: 'consumer', headers: { traceparent: `00-${'1'.repeat(32)}-${'2'.repeat(16)}-01` }, facts: { taskId: '2' } })!;
    await runLinked([a, b], () => withChildSpan('db transaction', {}, async () => undefined));
    a.end();
    b.end();

    const tx = (await finished()).find((s) => s.name === 'db transaction');
    expect(tx?.parentSpanContext).toBeUndefined();
    expect(tx?.links.map((l) => l.context.traceId)).toEqual([TRACE_ID, '1'.repeat(32)]);
    expect(tx?.attributes['labelflow.task_id']).toBeUndefined();
  });

  it('marks a span that ended with an error and ignores a second end', async () => {
    start();
    const span = startSpan('publish TaskCreated', { kind: 'producer' })!;
    span.end({ error: new Error('broker down') });
    span.end();

    const spans = await finished();
    expect(spans).toHaveLength(1);
    expect(spans[0]!.status).toMatchObject({ code: 2, message: 'broker down' });
  });

  it('stops recording once shut down, so a later start in the process registers again', async () => {
    start();
    await tracing!.shutdown();
    expect(tracingEnabled()).toBe(false);
    expect(startSpan('x', { kind: 'internal' })).toBeUndefined();

    start();
    expect(tracingEnabled()).toBe(true);
    startSpan('again', { kind: 'internal' })!.end();
    expect((await finished()).map((s) => s.name)).toEqual(['again']);
  });
});

describe('telemetry: continuedTraceHeaders', () => {
  const slowPath = (headers: Record<string, string>) => currentTraceHeaders(propagation.extract(context.active(), headers));
  const cases: Record<string, Record<string, string>> = {
    'a bare sampled traceparent': { traceparent: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01' },
    'an unsampled traceparent': { traceparent: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00' },
    'a traceparent with other flags': { traceparent: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-03' },
    'a future version with extra fields': { traceparent: '01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-extra' },
    'an all-zero trace id': { traceparent: '00-00000000000000000000000000000000-b7ad6b7169203331-01' },
    'garbage': { traceparent: 'not-a-trace' },
    'a tracestate and baggage': { traceparent: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01', tracestate: 'vendor=1', baggage: 'labelflow.task_id=7' },
    'no trace headers at all': { 'event-type': 'LabelSubmitted' },
  };
  for (const [name, headers] of Object.entries(cases)) {
    it(`passes on exactly what a non-recording span would for ${name}`, () => {
      expect(continuedTraceHeaders(headers)).toEqual(slowPath(headers));
    });
  }
});

describe('telemetry: consumedTraceHeaders', () => {
  it('continues the trace of a consumed message with baggage of the event\'s own saga facts, and nothing a producer added', () => {
    const carried = consumedTraceHeaders({ traceparent, tracestate: 'vendor=1', baggage: 'tenant=acme,labelflow.project_id=forged,labelflow.task_id=other' }, { taskId: '7', projectId: 'p-1', attempt: 2 });
    expect(carried).toMatchObject({ traceparent, tracestate: 'vendor=1' });
    const entries = Object.fromEntries((carried.baggage ?? '').split(',').map((e) => e.split('=') as [string, string]));
    expect(entries).toEqual({ 'labelflow.task_id': '7', 'labelflow.project_id': 'p-1', 'labelflow.attempt': '2' });
  });

  it('passes on no baggage for facts it was not given, and a message without trace headers starts none', () => {
    expect(consumedTraceHeaders({ baggage: 'tenant=acme' }, {})).toEqual({});
  });
});
