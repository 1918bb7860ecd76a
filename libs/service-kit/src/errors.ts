import { LabelflowError } from '@labelflow/contracts';

export const ServiceKitErrors = {
  CONFIG_INVALID: 'CONFIG_INVALID',
  MIGRATION_FAILED: 'MIGRATION_FAILED',
  DATABASE_UNAVAILABLE: 'DATABASE_UNAVAILABLE',
  CONCURRENT_UPDATE: 'CONCURRENT_UPDATE',
  ID_UNAVAILABLE: 'ID_UNAVAILABLE',
  EVENT_INVALID: 'EVENT_INVALID',
  /** A service definition the shell cannot run (two capabilities reacting to one event type). */
  DEFINITION_INVALID: 'DEFINITION_INVALID',
  /** The shell's own contract broken (a processor handed a task its batch did not load): a bug, never retried. */
  INVARIANT_BROKEN: 'INVARIANT_BROKEN',
  /** A readiness probe found its dependency down or silent. */
  DEPENDENCY_DOWN: 'DEPENDENCY_DOWN',
} as const;
export type ServiceKitErrorCode = (typeof ServiceKitErrors)[keyof typeof ServiceKitErrors];

export class ServiceKitError extends LabelflowError<ServiceKitErrorCode> {}

/** An error an HTTP route answers with: status, stable code, message, optional details. */
export class HttpError extends LabelflowError<string> {
  readonly status: number;
  constructor(status: number, code: string, message: string, details?: unknown) {
    super(code, message, { details });
    this.status = status;
  }
}
