import { OutboxError, OutboxErrors } from './errors';
import { RS, US } from './framing';
import type { PublishedMessage } from './types';

/** Under Kafka's default max.message.bytes (1 MB) with room for the record batch framing. */
export const DEFAULT_MAX_BATCH_BYTES = 768 * 1024;
/** Counted per message on top of value, key and headers: Kafka's record framing, generously. */
export const MESSAGE_OVERHEAD_BYTES = 64;

/**
 * A message read and not yet published, with its counted size. A plain row is one message; a
 * bundle (outboxBundlesMigrationSql) is one per frame, all with the row's id.
 */
export interface Pending {
  readonly id: string;
  readonly message: PublishedMessage;
  readonly bytes: number;
  /** An earlier row of the same key is parked: this one must be parked too, never sent. A bundle's messages are held together. */
  readonly held: boolean;
  /**
   * 0 unless this is its row's last message; then the row's message count (1 for a plain row).
   * Only such an entry marks its row: a bundle is taken off the pending list once its last message
   * is acknowledged, so a crash half way through one sends all of it again (consumers dedup).
   */
  readonly ends: number;
}

/** The rows of `entries` that are done once these entries are acknowledged (their last messages). */
export const endingRows = (entries: readonly Pending[]): Pending[] => entries.filter((e) => e.ends > 0);

/** Messages of the rows that `entries` end. */
export const messagesEnded = (entries: readonly Pending[]): number => entries.reduce((n, e) => n + e.ends, 0);

/** For each key with a parked row, the lowest such row's id (decimal text): a later row of the key is held. */
export type ParkedKeys = Readonly<Record<string, string>>;

/** Whether outbox id `a` comes before `b` (bigint ids, as decimal text without leading zeros). */
export const idBefore = (a: string, b: string): boolean => a.length < b.length || (a.length === b.length && a < b);

/** One row of the relay's read, as far as turning it into messages goes. */
export interface RowToSend {
  readonly id: string;
  readonly topic: string;
  readonly key: string;
  readonly payload: string;
  readonly headers: Readonly<Record<string, string>>;
  /** A bundle's frames (serializeOutboxRows), or null for a plain row. */
  readonly messages: string | null;
}


function parseHeaders(id: string, text: string): Readonly<Record<string, string>> {
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch (error) {
    throw new OutboxError(OutboxErrors.ROW_INVALID, `outbox bundle ${id} holds a frame whose headers are not JSON: ${(error as Error).message}`, { cause: error });
  }
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed) || Object.values(parsed).some((v) => typeof v !== 'string')) {
    throw new OutboxError(OutboxErrors.ROW_INVALID, `outbox bundle ${id} holds a frame whose headers are not an object of strings`);
  }
  return parsed as Record<string, string>;
}

/**
 * The keys a bundle's frames name, read as the relay's SQL reads a parked bundle's (the third field
 * of each frame, '' where there is none): for a bundle that cannot be read whole, so that the keys
 * it holds back in this drain are the ones later reads will hold back.
 */
export function bundleFrameKeys(text: string): string[] {
  return text.split(RS).map((frame) => frame.split(US)[2] ?? '');
}

/**
 * A read row's messages, in order, each with its counted size. A row is held when any of its
 * messages' keys has a parked row before it: a bundle then waits whole, as a plain row would.
 */
export function pendingOf(row: RowToSend, parked: ParkedKeys | null): Pending[] {
  const isHeld = (key: string) => {
    const first = parked?.[key];
    return first !== undefined && idBefore(first, row.id);
  };
  if (row.messages === null) {
    // The common case, on every row the relay reads: one message, no arrays to build.
    const message: PublishedMessage = { topic: row.topic, key: row.key, value: row.payload, headers: row.headers };
    return [{ id: row.id, message, bytes: sizeOf(message), held: isHeld(row.key), ends: 1 }];
  }
  const messages: PublishedMessage[] = [];
  // A bundle's messages mostly share their headers' text: parsed once, the object shared (read-only).
  let headersText: string | undefined;
  let headers: Readonly<Record<string, string>> = {};
  const text = row.messages;
  for (let start = 0; start <= text.length; ) {
    let end = text.indexOf(RS, start);
    if (end < 0) end = text.length;
    // eventId US topic US key US eventType US headers US payload; JSON text never holds US raw.
    // Cut by position, not split(): no array and no strings for the two fields not sent.
    const cuts = [start - 1];
    for (let at = start; cuts.length < 6; at++) {
      at = text.indexOf(US, at);
      if (at < 0 || at > end) break;
      cuts.push(at);
    }
    if (cuts.length !== 6) throw new OutboxError(OutboxErrors.ROW_INVALID, `outbox bundle ${row.id} holds a frame of ${cuts.length} fields, not 6`);
    const [, t, k, y, h, p] = cuts as [number, number, number, number, number, number];
    const ownHeaders = text.slice(h + 1, p);
    if (ownHeaders !== headersText) {
      headersText = ownHeaders;
      headers = parseHeaders(row.id, ownHeaders);
    }
    messages.push({ topic: text.slice(t + 1, k), key: text.slice(k + 1, y), value: text.slice(p + 1, end), headers });
    start = end + 1;
  }
  const held = parked !== null && messages.some((m) => isHeld(m.key));
  return messages.map((message, i) => ({ id: row.id, message, bytes: sizeOf(message), held, ends: i === messages.length - 1 ? messages.length : 0 }));
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
