import {
  ROOT_CONTEXT,
  SpanKind,
  SpanStatusCode,
  context,
  createContextKey,
  propagation,
  trace,
  type Attributes,
  type Baggage,
  type Context,
  type Link,
  type Span,
} from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { CompositePropagator, W3CBaggagePropagator, W3CTraceContextPropagator } from '@opentelemetry/core';
import { activeTracer } from './tracer-registry';

export type TraceHeaders = Readonly<Record<string, string>>;
type IncomingHeaders = Readonly<Record<string, string | string[] | undefined>>;

let propagationInstalled = false;

/**
 * Registers the W3C trace-context and baggage propagators and an async context manager, so trace
 * context flows from HTTP requests into outbox rows and from Kafka headers into handlers. Exporting
 * spans is startTracing's (OTEL_* env); without it, spans are non-recording but ids still travel.
 * Once per process: the API keeps the first registration and refuses later ones.
 */
export function installTracePropagation(): void {
  if (propagationInstalled) return;
  propagationInstalled = true;
  propagation.setGlobalPropagator(new CompositePropagator({ propagators: [new W3CTraceContextPropagator(), new W3CBaggagePropagator()] }));
  context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
}

/** Whether an SDK records spans (startTracing found an endpoint). Off: the span helpers do nothing. */
export const tracingEnabled = (): boolean => activeTracer() !== undefined;

/** The active trace context as carrier headers (`traceparent`, `tracestate`, and `baggage` when set). */
export function currentTraceHeaders(ctx: Context = context.active()): TraceHeaders {
  const carrier: Record<string, string> = {};
  propagation.inject(ctx, carrier);
  return carrier;
}

/**
 * The headers that continue the trace `headers` carry, as a span started under them would pass it
 * on while nothing records: the same trace and parent span, the same baggage. For hot paths that
 * must keep ids travelling without paying for a (non-recording) span and an async context per item.
 */
export function continuedTraceHeaders(headers: IncomingHeaders): TraceHeaders {
  const active = context.active();
  const { traceparent } = headers;
  // The common case, a bare version-00 traceparent in no other context, round-trips unchanged
  // through extract and inject: skip building two contexts per consumed event.
  if (active === ROOT_CONTEXT && headers.tracestate === undefined && headers.baggage === undefined && typeof traceparent === 'string' && CANONICAL_TRACEPARENT.test(traceparent)) {
    return { traceparent };
  }
  return currentTraceHeaders(propagation.extract(active, headers));
}

/** A traceparent exactly as the W3C propagator writes one back: version 00, valid non-zero ids, sampled or not. */
const CANONICAL_TRACEPARENT = /^00-(?!0{32})[\da-f]{32}-(?!0{16})[\da-f]{16}-0[01]$/;

/**
 * Only the trace-context headers of an HTTP request. An outside caller's `baggage` is not ours to
 * carry: it would travel into every outbox row and Kafka message the request causes.
 */
export function incomingTraceHeaders(headers: IncomingHeaders): TraceHeaders {
  const picked: Record<string, string> = {};
  for (const name of ['traceparent', 'tracestate'] as const) {
    const value = headers[name];
    if (typeof value === 'string') picked[name] = value;
  }
  return picked;
}

// With no SDK the global API hands out a no-op tracer whose spans still carry the parent's ids, so
// an incoming traceparent keeps travelling (withSpan) even while nothing is recorded.
const tracer = () => activeTracer() ?? trace.getTracer('labelflow');

export const SpanKinds = { consumer: SpanKind.CONSUMER, producer: SpanKind.PRODUCER, server: SpanKind.SERVER, internal: SpanKind.INTERNAL } as const;
export type SpanKindName = keyof typeof SpanKinds;

/** What a span knows of the saga it belongs to. Each known fact becomes an attribute, and task, project and attempt also baggage. */
export interface SagaFacts {
  readonly taskId?: string;
  readonly projectId?: string;
  readonly attempt?: number;
  readonly eventType?: string;
}

/** The attribute (and baggage) names of the saga facts. */
export const SagaAttributes = {
  taskId: 'labelflow.task_id',
  projectId: 'labelflow.project_id',
  attempt: 'labelflow.attempt',
  eventType: 'labelflow.event_type',
} as const;

const BAGGAGE_FACTS = ['taskId', 'projectId', 'attempt'] as const;

function factAttributes(facts: SagaFacts): Attributes {
  const attributes: Attributes = {};
  for (const name of Object.keys(SagaAttributes) as (keyof SagaFacts)[]) {
    const value = facts[name];
    if (value !== undefined && value !== '') attributes[SagaAttributes[name]] = value;
  }
  return attributes;
}

/** The saga facts a context's baggage carries, as attributes (attempt as a number). */
function baggageAttributes(ctx: Context): Attributes {
  const baggage = propagation.getBaggage(ctx);
  if (!baggage) return {};
  const attributes: Attributes = {};
  for (const name of BAGGAGE_FACTS) {
    const key = SagaAttributes[name];
    const value = baggage.getEntry(key)?.value;
    if (value === undefined) continue;
    attributes[key] = name === 'attempt' && /^\d{1,9}$/.test(value) ? Number(value) : value;
  }
  return attributes;
}

function withFactsInBaggage(ctx: Context, facts: SagaFacts): Context {
  let baggage: Baggage = propagation.getBaggage(ctx) ?? propagation.createBaggage();
  let changed = false;
  for (const name of BAGGAGE_FACTS) {
    const value = facts[name];
    if (value === undefined || value === '') continue;
    baggage = baggage.setEntry(SagaAttributes[name], { value: String(value) });
    changed = true;
  }
  return changed ? propagation.setBaggage(ctx, baggage) : ctx;
}

/**
 * A consumed message's trace headers as ours to continue: its trace context (`traceparent`,
 * `tracestate`), and baggage rebuilt from the event's own saga facts. Whatever else a producer put
 * in `baggage` (an outside model worker's entries, a forged project id) is not carried into every
 * later event of the saga, as an HTTP caller's is not (`incomingTraceHeaders`).
 */
export function consumedTraceHeaders(headers: IncomingHeaders, facts: SagaFacts): TraceHeaders {
  const parent = propagation.deleteBaggage(propagation.extract(context.active(), incomingTraceHeaders(headers)));
  return currentTraceHeaders(withFactsInBaggage(parent, facts));
}

/** A recording span handed to a library that does not import OpenTelemetry. */
export interface TraceSpan {
  /** Adds saga facts: attributes now, and baggage for whatever `run` starts from now on. */
  annotate(facts: SagaFacts, attributes?: Attributes): void;
  /** Runs `fn` with this span (and its baggage) active. */
  run<T>(fn: () => T): T;
  /** Carrier headers that continue this span: `traceparent`, `tracestate`, `baggage`. */
  headers(): TraceHeaders;
  /** Ends the span (a second call is ignored). `failed` or an `error` set status ERROR. */
  end(result?: { readonly error?: unknown; readonly failed?: boolean; readonly attributes?: Attributes }): void;
}

export interface SpanStart {
  readonly kind: SpanKindName;
  /** Carrier headers to continue (a request's or a message's); absent: the active context. */
  readonly headers?: IncomingHeaders;
  readonly facts?: SagaFacts;
  readonly attributes?: Attributes;
}

const spansOf = new WeakMap<TraceSpan, Span>();

/**
 * Starts a span, or returns undefined while tracing is off, so that callers spend nothing (no
 * header parsing, no allocation per row) unless an SDK records. A span continuing `headers`
 * ignores whatever context is active: a consumed message's trace is the message's.
 */
export function startSpan(name: string, { kind, headers, facts = {}, attributes = {} }: SpanStart): TraceSpan | undefined {
  const recording = activeTracer();
  if (!recording) return undefined;
  const parent = headers ? propagation.extract(ROOT_CONTEXT, headers) : context.active();
  let ctx = withFactsInBaggage(parent, facts);
  const span = recording.startSpan(name, { kind: SpanKinds[kind], attributes: { ...baggageAttributes(ctx), ...factAttributes(facts), ...attributes } }, parent);
  ctx = trace.setSpan(ctx, span);
  let ended = false;
  const handle: TraceSpan = {
    annotate(more, extra = {}) {
      span.setAttributes({ ...factAttributes(more), ...extra });
      ctx = withFactsInBaggage(ctx, more);
    },
    run: (fn) => context.with(ctx, fn),
    headers: () => currentTraceHeaders(ctx),
    end({ error, failed, attributes: last } = {}) {
      if (ended) return;
      ended = true;
      if (last) span.setAttributes(last);
      if (error !== undefined) span.recordException(error instanceof Error ? error : new Error(String(error)));
      if (error !== undefined || failed) span.setStatus({ code: SpanStatusCode.ERROR, ...(error instanceof Error ? { message: error.message } : {}) });
      span.end();
    },
  };
  spansOf.set(handle, span);
  return handle;
}

/** Links a span started under `runLinked` draws from its context: the deliveries it works for. */
const LINKS = createContextKey('labelflow.links');

/**
 * Runs `fn` in no trace, but with `spans` as the links of a span `withChildSpan` starts inside it:
 * one transaction applying several consumed events belongs to none of their traces alone.
 */
export function runLinked<T>(spans: readonly TraceSpan[], fn: () => T): T {
  const links: Link[] = spans.flatMap((s) => {
    const span = spansOf.get(s);
    return span ? [{ context: span.spanContext() }] : [];
  });
  return context.with(ROOT_CONTEXT.setValue(LINKS, links), fn);
}

/**
 * Runs `fn` in a child span of the active span, or of the links `runLinked` set. Work that nothing
 * traced asked for (a sweep, a prune) gets no span: it would open a trace of its own every tick.
 */
export async function withChildSpan<T>(name: string, attributes: Attributes, fn: (span: TraceSpan | undefined) => Promise<T>): Promise<T> {
  if (!activeTracer()) return fn(undefined);
  const active = context.active();
  const links = active.getValue(LINKS) as Link[] | undefined;
  if (!trace.getSpan(active)?.isRecording() && !links?.length) return fn(undefined);
  const span = startSpan(name, { kind: 'internal', attributes });
  if (span && links?.length) spansOf.get(span)?.addLinks(links);
  if (!span) return fn(undefined);
  try {
    const result = await span.run(() => fn(span));
    span.end();
    return result;
  } catch (error) {
    span.end({ error });
    throw error;
  }
}

/**
 * Runs `fn` in an active span that continues the trace carried by `headers` (a consumed message's
 * or an HTTP request's), so anything `fn` writes to the outbox carries this trace onward. The saga
 * facts of the carried baggage become attributes too.
 */
export async function withSpan<T>(name: string, kind: SpanKindName, headers: TraceHeaders, attributes: Record<string, string | number>, fn: () => Promise<T>): Promise<T> {
  const parent = propagation.extract(context.active(), headers);
  const all = activeTracer() ? { ...baggageAttributes(parent), ...attributes } : attributes;
  return tracer().startActiveSpan(name, { kind: SpanKinds[kind], attributes: all }, parent, async (span) => {
    try {
      return await fn();
    } catch (error) {
      span.recordException(error as Error);
      span.setStatus({ code: SpanStatusCode.ERROR });
      throw error;
    } finally {
      span.end();
    }
  });
}

/** Runs `fn` inside the trace context carried by `headers` (no new span). */
export function withTraceContext<T>(headers: IncomingHeaders, fn: () => T): T {
  return context.with(propagation.extract(context.active(), headers), fn);
}
