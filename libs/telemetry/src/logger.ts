import { context, isSpanContextValid, trace } from '@opentelemetry/api';
import { pino, type DestinationStream, type Logger, type LoggerOptions } from 'pino';
import { activeTracer } from './tracer-registry';

export type { Logger } from 'pino';

export interface LoggerDeps {
  readonly service: string;
  readonly level?: string;
  /** Where lines go; defaults to stdout. Tests pass a stream to assert on log lines. */
  readonly destination?: NodeJS.WritableStream;
}

/**
 * While a tracer records, a line written inside a span names it (`trace_id`, `span_id`), so a
 * "processing failed; retrying" or an "unhandled error" leads to its trace. Without one, nothing
 * is looked up: no context is active to read.
 */
const traceOfLine = (): Record<string, string> => {
  if (activeTracer() === undefined) return {};
  const span = trace.getSpanContext(context.active());
  return span && isSpanContextValid(span) ? { trace_id: span.traceId, span_id: span.spanId } : {};
};

export function createLogger({ service, level = 'info', destination }: LoggerDeps): Logger {
  const options: LoggerOptions = { level, base: { service }, timestamp: pino.stdTimeFunctions.isoTime, mixin: traceOfLine };
  return destination ? pino(options, destination as DestinationStream) : pino(options);
}
