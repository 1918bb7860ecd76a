/**
 * Base of every library's error catalog: a stable machine code, whether retrying can help, and the
 * underlying cause. Libraries declare their codes `as const` and subclass this.
 */
export class LabelflowError<Code extends string = string> extends Error {
  readonly code: Code;
  readonly retriable: boolean;
  readonly details?: unknown;

  constructor(code: Code, message: string, options: { retriable?: boolean; cause?: unknown; details?: unknown } = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = new.target.name;
    this.code = code;
    this.retriable = options.retriable ?? false;
    this.details = options.details;
  }
}

/** A result instead of a throw, for expected outcomes (rejections, duplicates, invalid input). */
export type Result<T = undefined, Reason = { code: string; message: string }> =
  | ({ readonly ok: true } & (T extends undefined ? { readonly value?: T } : { readonly value: T }))
  | { readonly ok: false; readonly reason: Reason };

/** Body of every HTTP error response. */
export interface ErrorBody {
  readonly error: { readonly code: string; readonly message: string; readonly details?: unknown };
}
