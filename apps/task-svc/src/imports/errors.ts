import { LabelflowError } from '@labelflow/contracts';

/** Why an upload of an import job stopped or was refused; each maps to one HTTP answer in routes.ts. */
export const ImportErrors = {
  /** Another upload of the same job is running. */
  IMPORT_IN_PROGRESS: 'IMPORT_IN_PROGRESS',
  /** The re-uploaded file differs from the first upload in the lines already imported. */
  IMPORT_CONTENT_MISMATCH: 'IMPORT_CONTENT_MISMATCH',
  /** The upload lost its hold on the job (it stalled past the lease and another upload took over). */
  IMPORT_TAKEN_OVER: 'IMPORT_TAKEN_OVER',
  /** The database stayed unavailable through every retry of a batch; committed batches stay. */
  IMPORT_STORE_UNAVAILABLE: 'IMPORT_STORE_UNAVAILABLE',
  /** The client's request stream ended abnormally (connection dropped, or silent past IMPORT_IDLE_MS); committed batches stay. */
  IMPORT_INTERRUPTED: 'IMPORT_INTERRUPTED',
  /** This instance runs IMPORT_MAX_CONCURRENT uploads already; retry after a moment. */
  IMPORT_BUSY: 'IMPORT_BUSY',
} as const;
export type ImportErrorCode = (typeof ImportErrors)[keyof typeof ImportErrors];

export class ImportError extends LabelflowError<ImportErrorCode> {}
