import type { PublishedMessage } from './types';

/** Under Kafka's default max.message.bytes (1 MB) with room for the record batch framing. */
export const DEFAULT_MAX_BATCH_BYTES = 768 * 1024;
/** Counted per message on top of value, key and headers: Kafka's record framing, generously. */
export const MESSAGE_OVERHEAD_BYTES = 64;

/** A row read and not yet published, with its Kafka message and its counted size. */
export interface Pending {
  readonly id: string;
  readonly message: PublishedMessage;
  readonly bytes: number;
  /** An earlier row of the same key is parked: this one must be parked too, never sent. */
  readonly held: boolean;
}

/** The next batch off the front of `window`: at most `maxRows` rows and `maxBytes` bytes (at least one row), and the held rows met on the way. */
export function take(window: Pending[], maxRows: number, maxBytes: number): { batch: Pending[]; held: Pending[] } {
  const batch: Pending[] = [];
  const held: Pending[] = [];
  let bytes = 0;
  let i = 0;
  for (; i < window.length && batch.length < maxRows; i++) {
    const row = window[i];
    if (!row) break;
    if (row.held) {
      held.push(row);
      continue;
    }
    if (batch.length > 0 && bytes + row.bytes > maxBytes) break;
    batch.push(row);
    bytes += row.bytes;
  }
  window.splice(0, i);
  return { batch, held };
}

/** What a message counts against `maxBatchBytes`: UTF-8 bytes of value, key, header names and values, plus framing. */
export function sizeOf(message: PublishedMessage): number {
  let n = Buffer.byteLength(message.value) + Buffer.byteLength(message.key) + MESSAGE_OVERHEAD_BYTES;
  for (const name in message.headers) n += Buffer.byteLength(name) + Buffer.byteLength(message.headers[name] ?? '');
  return n;
}

/** The broker's MESSAGE_TOO_LARGE / RECORD_LIST_TOO_LARGE, as kafkajs reports it directly or wrapped (and as the relay wraps it). */
export function isTooLarge(error: unknown): boolean {
  for (let e = error as { type?: unknown; cause?: unknown; originalError?: unknown } | undefined, depth = 0; e && depth < 6; depth++) {
    if (e.type === 'MESSAGE_TOO_LARGE' || e.type === 'RECORD_LIST_TOO_LARGE') return true;
    e = (e.originalError ?? e.cause) as typeof e;
  }
  return false;
}
