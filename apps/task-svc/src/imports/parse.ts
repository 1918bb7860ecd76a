import { createHash } from 'node:crypto';
import { DataUri, storable, toStorableText } from '@labelflow/contracts';
import { hasJsonStringLongerThan } from '@labelflow/service-kit';
import { z } from 'zod';

/** Why a line of an import file was rejected. The rest of the file goes on regardless. */
export const LineErrors = {
  LINE_TOO_LONG: 'LINE_TOO_LONG',
  INVALID_UTF8: 'INVALID_UTF8',
  INVALID_JSON: 'INVALID_JSON',
  VALIDATION_FAILED: 'VALIDATION_FAILED',
} as const;
export type LineErrorCode = (typeof LineErrors)[keyof typeof LineErrors];

/** One task of an import file: the same limits as `POST /tasks`, plus the client's business key. */
export const ImportLine = z
  .object({
    externalId: storable(z.string().min(1).max(256)),
    // Bounded before the trim: V8 trims to a slice of the string, and a short title padded with
    // 60 KB of blanks would keep them all alive until its batch is written.
    title: storable(z.string().max(600).trim().min(1).max(500)),
    dataUri: DataUri,
  })
  .strict();
export type ImportLine = z.infer<typeof ImportLine>;

/**
 * A physical line as the splitter cut it (1-based `number`, terminator and a trailing CR removed).
 * A line over the cap is never held in memory: only its length and a digest of its bytes are kept,
 * the digest so a resumed upload can still recognise the same file.
 */
export type RawLine =
  | { readonly number: number; readonly bytes: Buffer }
  | { readonly number: number; readonly tooLong: { readonly bytes: number; readonly sha256: Buffer } };

export interface LineSplitter {
  /** The lines this chunk completed, in order. */
  push(chunk: Buffer): RawLine[];
  /** The last line when the input did not end with a newline. */
  end(): RawLine[];
}

const NEWLINE = 0x0a;
const CR = 0x0d;

/**
 * Cuts a byte stream into lines at `\n`, whatever the chunk boundaries (a line, or a multi-byte
 * character, may straddle chunks). Memory is bounded by `maxLineBytes` plus one chunk.
 */
export function createLineSplitter(maxLineBytes: number): LineSplitter {
  let parts: Buffer[] = [];
  let held = 0;
  /**
   * A line past the cap, hashed as it streams. Its last byte so far (`tail`) is held back: if the
   * line turns out to end in CR before its newline, that CR is dropped as the normal path drops it,
   * so the digest and length never depend on where the chunks were cut.
   */
  let overflow: { bytes: number; hash: ReturnType<typeof createHash>; tail: Buffer } | undefined;
  let number = 0;

  /** Hashes all of `data` but its last byte, which becomes the new tail. */
  const stream = (o: NonNullable<typeof overflow>, data: Buffer) => {
    if (data.length === 0) return;
    o.hash.update(data.subarray(0, data.length - 1));
    o.bytes += data.length - 1;
    o.tail = Buffer.from(data.subarray(data.length - 1));
  };

  const finish = (last: Buffer): RawLine => {
    number += 1;
    if (overflow) {
      let end = Buffer.concat([overflow.tail, last]);
      if (end.length > 0 && end[end.length - 1] === CR) end = end.subarray(0, end.length - 1);
      overflow.hash.update(end);
      const line: RawLine = { number, tooLong: { bytes: overflow.bytes + end.length, sha256: overflow.hash.digest() } };
      overflow = undefined;
      return line;
    }
    let bytes = parts.length === 0 ? last : Buffer.concat([...parts, last]);
    if (bytes.length > 0 && bytes[bytes.length - 1] === CR) bytes = bytes.subarray(0, bytes.length - 1);
    parts = [];
    held = 0;
    if (bytes.length > maxLineBytes) return { number, tooLong: { bytes: bytes.length, sha256: createHash('sha256').update(bytes).digest() } };
    return { number, bytes };
  };

  const hold = (rest: Buffer) => {
    if (rest.length === 0) return;
    if (overflow) {
      stream(overflow, Buffer.concat([overflow.tail, rest]));
      return;
    }
    // One byte of slack: a CR the terminator will strip does not count against the cap.
    if (held + rest.length > maxLineBytes + 1) {
      overflow = { bytes: 0, hash: createHash('sha256'), tail: Buffer.alloc(0) };
      stream(overflow, Buffer.concat([...parts, rest]));
      parts = [];
      held = 0;
      return;
    }
    // A copy: a view would keep the whole chunk alive for the sake of a line's tail.
    parts.push(Buffer.from(rest));
    held += rest.length;
  };

  return {
    push(chunk) {
      const lines: RawLine[] = [];
      let start = 0;
      for (let at = chunk.indexOf(NEWLINE, start); at !== -1; at = chunk.indexOf(NEWLINE, start)) {
        lines.push(finish(chunk.subarray(start, at)));
        start = at + 1;
      }
      hold(chunk.subarray(start));
      return lines;
    },
    end() {
      if (!overflow && held === 0) return [];
      return [finish(Buffer.alloc(0))];
    },
  };
}

/** What one line amounts to: nothing (blank), a task, or a rejection to report with its number. */
export type LineVerdict =
  | { readonly kind: 'blank' }
  | { readonly kind: 'task'; readonly task: ImportLine }
  | { readonly kind: 'rejected'; readonly code: LineErrorCode; readonly message: string };

const utf8 = new TextDecoder('utf-8', { fatal: true });

/**
 * Longer than any string a good line holds, escaped (a 2,048-character `dataUri` of `\uXXXX`
 * escapes is 12,288 bytes), and shorter than the 16,384 characters past which V8 hashes a string
 * by its length alone (`V8_LENGTH_HASHED_STRING`): lines full of long keys of one length would
 * make JSON.parse quadratic, seconds of CPU per line on the thread every request and consumer of
 * the service shares.
 */
export const MAX_JSON_STRING_BYTES = 12_800;

/**
 * A fresh copy of a short message: a slice or a concatenation of a line's text would keep the
 * whole line alive for as long as the message is (V8 slices and cons strings point into their
 * parts), and a batch holds thousands of them.
 */
const own = (message: string): string => Buffer.from(message, 'utf8').toString('utf8');

/** Reads one line: JSON of an `ImportLine`, or a reason naming what is wrong with it. */
export function readLine(line: RawLine, maxLineBytes: number): LineVerdict {
  if ('tooLong' in line) return { kind: 'rejected', code: LineErrors.LINE_TOO_LONG, message: `line is ${line.tooLong.bytes} bytes, more than the ${maxLineBytes} allowed` };
  let text: string;
  try {
    text = utf8.decode(line.bytes);
  } catch {
    return { kind: 'rejected', code: LineErrors.INVALID_UTF8, message: 'line is not valid UTF-8' };
  }
  if (text.trim() === '') return { kind: 'blank' };
  if (hasJsonStringLongerThan(line.bytes, MAX_JSON_STRING_BYTES)) return { kind: 'rejected', code: LineErrors.VALIDATION_FAILED, message: `line holds a string longer than ${MAX_JSON_STRING_BYTES} bytes, more than any field allows` };
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch (error) {
    // The parser's message quotes the line: cut, then made storable, or one bad line would fail its whole batch.
    return { kind: 'rejected', code: LineErrors.INVALID_JSON, message: own(toStorableText(`line is not JSON: ${(error as Error).message}`.slice(0, 300))) };
  }
  const parsed = ImportLine.safeParse(json);
  if (parsed.success) return { kind: 'task', task: parsed.data };
  // Each part capped before they are joined: zod quotes an unknown key whole in its message.
  const problems = parsed.error.issues.slice(0, 5).map((i) => `${['line', ...i.path.map((p) => String(p).slice(0, 64))].join('.')} ${i.message.slice(0, 200)}`);
  return { kind: 'rejected', code: LineErrors.VALIDATION_FAILED, message: own(toStorableText(problems.join('; ').slice(0, 500))) };
}

/**
 * A running digest of the lines read so far, so a re-upload can prove it is the same file up to
 * where the first upload's committed batches reached. Lines are hashed without their terminators
 * (a file with or without a final newline, with LF or CRLF, is the same file).
 */
export function createPrefixDigest(): { add(line: RawLine): void; digest(): string } {
  const hash = createHash('sha256');
  return {
    add(line) {
      if ('tooLong' in line) hash.update(line.tooLong.sha256);
      else hash.update(line.bytes);
      hash.update('\n');
    },
    digest: () => hash.copy().digest('hex'),
  };
}

/** The digest of no lines at all: where a new job starts. */
export const EMPTY_PREFIX = createPrefixDigest().digest();
