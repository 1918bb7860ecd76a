import { pino, type DestinationStream, type Logger, type LoggerOptions } from 'pino';

export type { Logger } from 'pino';

export interface LoggerDeps {
  readonly service: string;
  readonly level?: string;
  /** Where lines go; defaults to stdout. Tests pass a stream to assert on log lines. */
  readonly destination?: NodeJS.WritableStream;
}

export function createLogger({ service, level = 'info', destination }: LoggerDeps): Logger {
  const options: LoggerOptions = { level, base: { service }, timestamp: pino.stdTimeFunctions.isoTime };
  return destination ? pino(options, destination as DestinationStream) : pino(options);
}
