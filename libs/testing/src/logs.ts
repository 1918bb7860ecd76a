import { Writable } from 'node:stream';
import { createLogger, type Logger } from '@labelflow/telemetry';

export interface LogLine {
  readonly time: string;
  readonly level: number;
  readonly msg?: string;
  readonly [field: string]: unknown;
}

/**
 * A real logger whose lines a test can read back, for asserting on what a component reports (a
 * retry, a backoff) without a hook into its internals.
 */
export function captureLogs({ service = 'test', level = 'info' }: { service?: string; level?: 'trace' | 'debug' | 'info' | 'warn' | 'error' } = {}): {
  readonly logger: Logger;
  readonly lines: readonly LogLine[];
} {
  const lines: LogLine[] = [];
  const destination = new Writable({
    write(chunk: Buffer, _encoding, done) {
      for (const text of chunk.toString().split('\n')) if (text.trim() !== '') lines.push(JSON.parse(text) as LogLine);
      done();
    },
  });
  return { logger: createLogger({ service, level, destination }), lines };
}
