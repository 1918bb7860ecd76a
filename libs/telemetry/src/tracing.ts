import { context, propagation, trace, SpanKind, SpanStatusCode, type Context } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { W3CTraceContextPropagator } from '@opentelemetry/core';

export type TraceHeaders = Readonly<Record<string, string>>;

/**
 * Registers the W3C propagator and an async context manager, so trace context flows from HTTP
 * requests into outbox rows and from Kafka headers into handlers. Exporting spans is left to an SDK
 * the operator configures (OTEL_* env); without one, spans are non-recording but ids still travel.
 */
export function installTracePropagation(): void {
  propagation.setGlobalPropagator(new W3CTraceContextPropagator());
  context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
}

/** The active trace context as carrier headers (`traceparent`, `tracestate`). */
export function currentTraceHeaders(ctx: Context = context.active()): TraceHeaders {
  const carrier: Record<string, string> = {};
  propagation.inject(ctx, carrier);
  return carrier;
}

// Looked up once per process: every consumed event opens a span, and the global API checks version
// compatibility on each lookup. The proxy it returns follows an SDK registered later.
let labelflowTracer: ReturnType<typeof trace.getTracer> | undefined;
const tracer = () => (labelflowTracer ??= trace.getTracer('labelflow'));

export const SpanKinds = { consumer: SpanKind.CONSUMER, server: SpanKind.SERVER, internal: SpanKind.INTERNAL } as const;

/**
 * Runs `fn` in an active span that continues the trace carried by `headers` (a consumed message's
 * or an HTTP request's), so anything `fn` writes to the outbox carries this trace onward.
 */
export async function withSpan<T>(
  name: string,
  kind: keyof typeof SpanKinds,
  headers: TraceHeaders,
  attributes: Record<string, string | number>,
  fn: () => Promise<T>,
): Promise<T> {
  const parent = propagation.extract(context.active(), headers);
  return tracer().startActiveSpan(name, { kind: SpanKinds[kind], attributes }, parent, async (span) => {
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
export function withTraceContext<T>(headers: Readonly<Record<string, string | string[] | undefined>>, fn: () => T): T {
  return context.with(propagation.extract(context.active(), headers), fn);
}
