import { LabelflowError } from '@labelflow/contracts';

export const TelemetryErrors = {
  /**
   * An OTEL_* variable that tracing cannot work with (an endpoint that is not an http(s) URL).
   * Raised at start: a service that silently exported nowhere would look traced and be blind.
   */
  CONFIG_INVALID: 'TELEMETRY_CONFIG_INVALID',
} as const;
export type TelemetryErrorCode = (typeof TelemetryErrors)[keyof typeof TelemetryErrors];

export class TelemetryError extends LabelflowError<TelemetryErrorCode> {}
