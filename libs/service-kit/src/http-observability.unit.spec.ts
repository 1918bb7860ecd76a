import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { InMemorySpanExporter } from '@opentelemetry/sdk-trace-base';
import { createTokenVerifier, generateSigningKey, issueToken, type AuthHookOptions } from '@labelflow/auth';
import { createMetrics, currentTraceHeaders, installTracePropagation, startTracing, type Tracing } from '@labelflow/telemetry';
import { captureLogs } from '@labelflow/testing';
import { BaseConfig, loadConfig } from './config';
import { createHttpApp, createMetricsApp, requestTrace } from './http';
import { honourPreferWait } from './prefer';

const ISSUER = 'observability-test-issuer';
const AUDIENCE = 'observability-test';
let auth: AuthHookOptions;
let admin: { authorization: string };
beforeAll(async () => {
  installTracePropagation();
  const key = await generateSigningKey();
  auth = { verifier: createTokenVerifier({ issuer: ISSUER, audience: AUDIENCE, jwks: key.publicJwks }) };
  const token = await issueToken({ jwk: key.privateJwk }, { issuer: ISSUER, audience: AUDIENCE, subject: 'ops-1', admin: true });
  admin = { authorization: `Bearer ${token}` };
});

const logger = () => captureLogs({ service: 'test' }).logger;
const TRACE_ID = '4bf92f3577b34da6a3ce929d0e0e4736';

/** An app with one task route that answers what trace context its handler ran in. */
async function appWithRoutes(metrics = createMetrics({ service: 'http-test', defaults: false })) {
  const app = createHttpApp({ logger: logger(), readiness: {}, auth, metrics });
  // What an emitter inside the handler continues: the request's trace, else the active context's.
  app.post('/tasks/:taskId/claim', async (request) => requestTrace(request) ?? currentTraceHeaders());
  app.post('/active', async () => currentTraceHeaders());
  app.post('/tasks', async (_request, reply) => reply.status(201).send({ taskId: '9001', projectId: 'c6c7d0a2-1b2c-4d5e-8f90-abcdef012345' }));
  // A route that honours Prefer: wait (and here answers at once).
  app.post('/tasks/:taskId/labels', async (request, reply) => ({ waitMs: honourPreferWait(request, reply) ?? null }));
  await app.ready();
  return { app, metrics };
}

describe('service-kit: HTTP request metrics', () => {
  it('counts requests and observes durations by route pattern, never by the raw URL', async () => {
    const { app, metrics } = await appWithRoutes();
    await app.inject({ method: 'POST', url: '/tasks/123/claim', headers: admin, payload: {} });
    await app.inject({ method: 'POST', url: '/tasks/456/claim', headers: admin, payload: {} });
    await app.inject({ method: 'POST', url: '/tasks/456/claim', payload: {} });

    const text = await metrics.render();
    expect(text).toContain('http_requests_total{method="POST",route="/tasks/:taskId/claim",status="200",service="http-test"} 2');
    expect(text).toContain('http_requests_total{method="POST",route="/tasks/:taskId/claim",status="401",service="http-test"} 1');
    expect(text).toContain('http_request_duration_seconds_count{service="http-test",method="POST",route="/tasks/:taskId/claim",long_poll="false"} 3');
    expect(text).not.toContain('/tasks/123');
  });

  it('files the durations of requests whose Prefer: wait was honoured apart, so a long poll is not read as latency', async () => {
    const { app, metrics } = await appWithRoutes();
    await app.inject({ method: 'POST', url: '/tasks/7/labels', headers: { ...admin, prefer: 'wait=5' }, payload: {} });
    await app.inject({ method: 'POST', url: '/tasks/7/labels', headers: admin, payload: {} });
    await app.inject({ method: 'POST', url: '/tasks/7/labels', headers: admin, payload: {} });

    const text = await metrics.render();
    expect(text).toContain('http_request_duration_seconds_count{service="http-test",method="POST",route="/tasks/:taskId/labels",long_poll="true"} 1');
    expect(text).toContain('http_request_duration_seconds_count{service="http-test",method="POST",route="/tasks/:taskId/labels",long_poll="false"} 2');
  });

  it('files every unknown path under one route, so scanners cannot grow the series', async () => {
    const { app, metrics } = await appWithRoutes();
    await app.inject({ url: '/wp-admin/1', headers: admin });
    await app.inject({ url: '/wp-admin/2', headers: admin });

    expect(await metrics.render()).toContain('http_requests_total{method="GET",route="unmatched",status="404",service="http-test"} 2');
  });
});

describe('service-kit: /metrics for scrapers (METRICS_PORT)', () => {
  it('keeps asking for a platform admin on the main port', async () => {
    const { app } = await appWithRoutes();
    expect((await app.inject({ url: '/metrics' })).statusCode).toBe(401);
    expect((await app.inject({ url: '/metrics', headers: admin })).statusCode).toBe(200);
  });

  it('serves /metrics without a token on the scrape app, and nothing else', async () => {
    const metrics = createMetrics({ service: 'http-test', defaults: false });
    metrics.counter('things_total', 'things').inc();
    const scrape = createMetricsApp({ logger: logger(), metrics });

    const res = await scrape.inject({ url: '/metrics' });
    expect(res.statusCode).toBe(200);
    expect(res.headers['content-type']).toContain('text/plain');
    expect(res.body).toContain('things_total{service="http-test"} 1');
    const other = await scrape.inject({ url: '/tasks' });
    expect(other.statusCode).toBe(404);
    expect(other.json()).toMatchObject({ error: { code: 'NOT_FOUND' } });
  });

  it('reads METRICS_PORT as an optional port, served on loopback unless METRICS_HOST says otherwise', () => {
    const env = {
      PORT: '3001',
      KAFKA_BROKERS: 'k:9092',
      DATABASE_URL: 'postgres://localhost/t',
      REDIS_URL: 'redis://localhost:6379',
      AUTH_ISSUER: 'https://id.example.com/',
      AUTH_AUDIENCE: 'labelflow',
      AUTH_PUBLIC_KEYS: JSON.stringify({ keys: [{ kty: 'OKP', crv: 'Ed25519', x: '11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo' }] }),
    };
    expect(loadConfig(BaseConfig, env).METRICS_PORT).toBeUndefined();
    expect(loadConfig(BaseConfig, { ...env, METRICS_PORT: '9464' }).METRICS_PORT).toBe(9464);
    expect(() => loadConfig(BaseConfig, { ...env, METRICS_PORT: '70000' })).toThrow(/METRICS_PORT/);
    expect(loadConfig(BaseConfig, env).METRICS_HOST).toBe('127.0.0.1');
    expect(loadConfig(BaseConfig, { ...env, METRICS_HOST: '0.0.0.0' }).METRICS_HOST).toBe('0.0.0.0');
  });
});

describe('service-kit: HTTP server spans', () => {
  let tracing: Tracing | undefined;
  afterEach(async () => {
    await tracing?.shutdown();
    tracing = undefined;
  });

  it('continues the caller traceparent, names the route and puts the task id in attributes and baggage', async () => {
    const exporter = new InMemorySpanExporter();
    tracing = startTracing({ service: 'task-svc', logger: logger(), env: { OTEL_EXPORTER_OTLP_ENDPOINT: 'http://127.0.0.1:4318' }, exporter });
    const { app } = await appWithRoutes();

    const res = await app.inject({ method: 'POST', url: '/tasks/123/claim', headers: { ...admin, traceparent: `00-${TRACE_ID}-00f067aa0ba902b7-01`, baggage: 'secret=from-outside' }, payload: {} });
    const seen = res.json<Record<string, string>>();
    await tracing.flush();

    const [span] = exporter.getFinishedSpans();
    expect(span?.name).toBe('POST /tasks/:taskId/claim');
    expect(span?.spanContext().traceId).toBe(TRACE_ID);
    expect(span?.attributes).toMatchObject({ 'http.route': '/tasks/:taskId/claim', 'http.request.method': 'POST', 'http.response.status_code': 200, 'labelflow.task_id': '123' });
    // What the handler emits continues this span, with our baggage and none of the caller's.
    expect(seen.traceparent).toContain(span!.spanContext().spanId);
    expect(decodeURIComponent(seen.baggage ?? '')).toBe('labelflow.task_id=123');
  });

  it('learns the id of a task the request created from its answer', async () => {
    const exporter = new InMemorySpanExporter();
    tracing = startTracing({ service: 'task-svc', logger: logger(), env: { OTEL_EXPORTER_OTLP_ENDPOINT: 'http://127.0.0.1:4318' }, exporter });
    const { app } = await appWithRoutes();

    await app.inject({ method: 'POST', url: '/tasks', headers: admin, payload: { projectId: 'c6c7d0a2-1b2c-4d5e-8f90-abcdef012345' } });
    await tracing.flush();

    expect(exporter.getFinishedSpans()[0]?.attributes).toMatchObject({ 'labelflow.task_id': '9001', 'labelflow.project_id': 'c6c7d0a2-1b2c-4d5e-8f90-abcdef012345', 'http.response.status_code': 201 });
  });

  it('without tracing, hands what the handler emits the caller trace context and no baggage, with no active context per request', async () => {
    const { app } = await appWithRoutes();
    const headers = { ...admin, traceparent: `00-${TRACE_ID}-00f067aa0ba902b7-01`, baggage: 'secret=from-outside' };
    const res = await app.inject({ method: 'POST', url: '/tasks/123/claim', headers, payload: {} });
    expect(res.json()).toEqual({ traceparent: `00-${TRACE_ID}-00f067aa0ba902b7-01` });
    // An active context per request would take an AsyncLocalStorage (see requestTrace).
    expect((await app.inject({ method: 'POST', url: '/active', headers, payload: {} })).json()).toEqual({});
  });
});
