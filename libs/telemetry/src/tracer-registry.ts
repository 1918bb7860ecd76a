import type { Tracer } from '@opentelemetry/api';

// Internal to this library (not exported from index.ts): the tracer of the SDK that startTracing
// registered, or none. The span helpers read it to decide between doing nothing at all (tracing
// off) and recording, so that code paths that would otherwise allocate per row or per delivery cost
// nothing while no SDK runs.
let active: Tracer | undefined;

export const activeTracer = (): Tracer | undefined => active;

export function setActiveTracer(tracer: Tracer | undefined): void {
  active = tracer;
}
