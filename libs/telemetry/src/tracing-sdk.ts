import { DiagLogLevel, diag, trace } from '@opentelemetry/api';
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-http';
import { defaultResource, detectResources, envDetector, resourceFromAttributes } from '@opentelemetry/resources';
import { BasicTracerProvider, BatchSpanProcessor, type SpanExporter } from '@opentelemetry/sdk-trace-base';
import { ATTR_SERVICE_NAME } from '@opentelemetry/semantic-conventions';
import { TelemetryError, TelemetryErrors } from './errors';
import type { Logger } from './logger';
import { setActiveTracer } from './tracer-registry';

type Env = Readonly<Record<string, string | undefined>>;

/** What the OTEL_* variables ask for: nothing, or OTLP/HTTP export of traces to one URL. */
export type TracingSettings =
  | { readonly enabled: false; readonly reason: string }
  | { readonly enabled: true; readonly tracesUrl: string; readonly serviceName: string; readonly warnings: readonly string[] };

const set = (env: Env, name: string): string | undefined => {
  const value = env[name]?.trim();
  return value === undefined || value === '' ? undefined : value;
};

/**
 * Reads the standard variables that decide whether traces are exported, and where to. Tracing is
 * off unless an OTLP endpoint is named: a service must not try to reach a collector nobody runs.
 * The other standard knobs (OTEL_TRACES_SAMPLER[_ARG], OTEL_BSP_*, OTEL_EXPORTER_OTLP_HEADERS,
 * OTEL_EXPORTER_OTLP_TIMEOUT, OTEL_RESOURCE_ATTRIBUTES) are read by the SDK itself.
 */
export function tracingSettings(service: string, env: Env): TracingSettings {
  if (set(env, 'OTEL_SDK_DISABLED')?.toLowerCase() === 'true') return { enabled: false, reason: 'OTEL_SDK_DISABLED=true' };
  const exporters = set(env, 'OTEL_TRACES_EXPORTER')?.split(',').map((e) => e.trim().toLowerCase());
  if (exporters && !exporters.includes('otlp')) return { enabled: false, reason: `OTEL_TRACES_EXPORTER=${exporters.join(',')} (only otlp is supported)` };
  const tracesEndpoint = set(env, 'OTEL_EXPORTER_OTLP_TRACES_ENDPOINT');
  const endpoint = set(env, 'OTEL_EXPORTER_OTLP_ENDPOINT');
  // The signal-specific variable is the full URL; the general one is a base the signal path joins.
  const tracesUrl = tracesEndpoint ?? (endpoint === undefined ? undefined : `${endpoint.replace(/\/+$/, '')}/v1/traces`);
  if (tracesUrl === undefined) return { enabled: false, reason: 'no OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT' };
  const variable = tracesEndpoint ? 'OTEL_EXPORTER_OTLP_TRACES_ENDPOINT' : 'OTEL_EXPORTER_OTLP_ENDPOINT';
  let protocol: string;
  try {
    protocol = new URL(tracesUrl).protocol;
  } catch {
    protocol = '';
  }
  if (protocol !== 'http:' && protocol !== 'https:') {
    throw new TelemetryError(TelemetryErrors.CONFIG_INVALID, `${variable}: must be an http:// or https:// URL`, { details: [`${variable}: must be an http:// or https:// URL`] });
  }
  const warnings: string[] = [];
  const wire = set(env, 'OTEL_EXPORTER_OTLP_TRACES_PROTOCOL') ?? set(env, 'OTEL_EXPORTER_OTLP_PROTOCOL');
  if (wire !== undefined && wire !== 'http/json') warnings.push(`OTEL_EXPORTER_OTLP_PROTOCOL=${wire} is not supported; traces are sent as OTLP http/json`);
  return { enabled: true, tracesUrl, serviceName: set(env, 'OTEL_SERVICE_NAME') ?? service, warnings };
}

export interface TracingDeps {
  /** The default `service.name`; OTEL_SERVICE_NAME overrides it. */
  readonly service: string;
  readonly logger: Logger;
  /** Defaults to `process.env`. */
  readonly env?: Env;
  /** Where spans go instead of OTLP/HTTP (tests); only used when the settings enable tracing. */
  readonly exporter?: SpanExporter;
}

export interface Tracing {
  readonly enabled: boolean;
  /** Exports every ended span now. */
  flush(): Promise<void>;
  /** Exports what is buffered, then stops recording (the last holder in the process unregisters the SDK). */
  shutdown(): Promise<void>;
}

interface Registered {
  readonly provider: BasicTracerProvider;
  readonly serviceName: string;
  holders: number;
}

// One SDK per process: the global API accepts one tracer provider. Several services built in one
// process (route tests) share it; the last to close shuts it down.
let registered: Registered | undefined;

const OFF: Tracing = { enabled: false, flush: async () => undefined, shutdown: async () => undefined };

/**
 * Starts the OpenTelemetry trace SDK when the OTEL_* variables name an endpoint, exporting OTLP
 * over HTTP (JSON) in batches. Otherwise nothing is registered and every span helper of this
 * library is a no-op. `startService` calls it while building, and closes it last.
 */
export function startTracing({ service, logger, env = process.env, exporter }: TracingDeps): Tracing {
  const settings = tracingSettings(service, env);
  if (!settings.enabled) {
    logger.debug({ reason: settings.reason }, 'tracing off');
    return OFF;
  }
  for (const warning of settings.warnings) logger.warn(warning);
  if (registered) {
    if (registered.serviceName !== settings.serviceName) logger.warn({ recording: registered.serviceName }, 'tracing already started in this process; spans keep its service.name');
  } else {
    registered = { provider: createProvider(settings.serviceName, settings.tracesUrl, logger, exporter), serviceName: settings.serviceName, holders: 0 };
    trace.setGlobalTracerProvider(registered.provider);
    setActiveTracer(registered.provider.getTracer('labelflow'));
    logger.info({ endpoint: settings.tracesUrl, serviceName: settings.serviceName }, 'tracing on: exporting OTLP/HTTP');
  }
  const holding = registered;
  holding.holders++;
  let closed = false;
  return {
    enabled: true,
    flush: () => holding.provider.forceFlush(),
    async shutdown() {
      if (closed) return;
      closed = true;
      holding.holders--;
      if (holding.holders > 0) return void (await holding.provider.forceFlush());
      if (registered === holding) {
        registered = undefined;
        setActiveTracer(undefined);
        trace.disable();
      }
      await holding.provider.shutdown();
      diag.disable();
    },
  };
}

function createProvider(serviceName: string, url: string, logger: Logger, exporter?: SpanExporter): BasicTracerProvider {
  // Export failures (a collector that is down) surface in the service's own log, not on stderr.
  const log = logger.child({ component: 'otel' });
  diag.setLogger(
    {
      error: (message, ...args) => log.warn({ args }, message),
      warn: (message, ...args) => log.warn({ args }, message),
      info: (message, ...args) => log.debug({ args }, message),
      debug: () => undefined,
      verbose: () => undefined,
    },
    { logLevel: DiagLogLevel.WARN, suppressOverrideMessage: true },
  );
  const resource = defaultResource()
    .merge(resourceFromAttributes({ [ATTR_SERVICE_NAME]: serviceName }))
    // OTEL_RESOURCE_ATTRIBUTES (and OTEL_SERVICE_NAME again) win over the defaults.
    .merge(detectResources({ detectors: [envDetector] }));
  return new BasicTracerProvider({ resource, spanProcessors: [new BatchSpanProcessor(exporter ?? new OTLPTraceExporter({ url }))] });
}
