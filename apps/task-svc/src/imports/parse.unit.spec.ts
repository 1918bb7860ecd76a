import { describe, expect, it } from 'vitest';
import { isStorableText } from '@labelflow/contracts';
import { hasJsonStringLongerThan } from '@labelflow/service-kit';
import { createLineSplitter, createPrefixDigest, EMPTY_PREFIX, LineErrors, MAX_JSON_STRING_BYTES, readLine, type RawLine } from './parse';

const text = (line: RawLine) => ('bytes' in line ? line.bytes.toString('utf8') : `<too long: ${line.tooLong.bytes}>`);
const split = (chunks: readonly (string | Buffer)[], max = 64) => {
  const splitter = createLineSplitter(max);
  const lines = chunks.flatMap((c) => splitter.push(typeof c === 'string' ? Buffer.from(c) : c));
  return [...lines, ...splitter.end()];
};

describe('the NDJSON line splitter', () => {
  it('cuts lines at newlines whatever the chunk boundaries, numbering them from 1', () => {
    const lines = split(['{"a":', '1}\n{"b"', ':2}\n\n{"c":3}']);
    expect(lines.map((l) => [l.number, text(l)])).toEqual([
      [1, '{"a":1}'],
      [2, '{"b":2}'],
      [3, ''],
      [4, '{"c":3}'],
    ]);
  });

  it('strips a CR before the newline and finds no extra line after a final newline', () => {
    expect(split(['x\r\ny\r\n']).map(text)).toEqual(['x', 'y']);
  });

  it('keeps a multi-byte character intact when a chunk boundary falls inside it', () => {
    const bytes = Buffer.from('{"t":"猫"}\n');
    expect(split([bytes.subarray(0, 7), bytes.subarray(7)]).map(text)).toEqual(['{"t":"猫"}']);
  });

  it('reports a line over the cap by its length without holding it, and goes on with the next line', () => {
    const long = 'x'.repeat(200);
    const lines = split([long.slice(0, 50), long.slice(50), '\nok\n'], 64);
    expect(lines.map((l) => [l.number, text(l)])).toEqual([
      [1, '<too long: 200>'],
      [2, 'ok'],
    ]);
  });

  it('gives an over-long CRLF line the same length and digest however the chunks cut it, and the same as with LF', () => {
    const long = 'x'.repeat(100);
    const cuts = [[`${long}\r\nok\n`], [long, '\r', '\nok\n'], [long.slice(0, 70), `${long.slice(70)}\r`, '\nok\n'], [`${long}\nok\n`], [long.slice(0, 99), `x\r\n`, 'ok\n']];
    const seen = cuts.map((chunks) => {
      const [first, second] = split(chunks, 64);
      expect(text(second!)).toBe('ok');
      return 'tooLong' in first! ? [first.tooLong.bytes, first.tooLong.sha256.toString('hex')] : ['not too long'];
    });
    for (const s of seen) expect(s).toEqual(seen[0]);
    expect(seen[0]![0]).toBe(100);
  });

  it('reports an over-long last line without a newline too', () => {
    expect(split(['ok\n', 'y'.repeat(100)], 64).map(text)).toEqual(['ok', '<too long: 100>']);
  });

  it('gives nothing for an empty body', () => {
    expect(split([])).toEqual([]);
  });
});

describe('reading one import line', () => {
  const read = (s: string | Buffer) => readLine({ number: 1, bytes: typeof s === 'string' ? Buffer.from(s) : s }, 64);

  it('accepts an object with externalId, title and dataUri, trimming the title', () => {
    expect(read('{"externalId":"e-1","title":" cat? ","dataUri":"s3://b/1.jpg"}')).toEqual({ kind: 'task', task: { externalId: 'e-1', title: 'cat?', dataUri: 's3://b/1.jpg' } });
  });

  it('treats a line of whitespace as blank', () => {
    expect(read('   \t')).toEqual({ kind: 'blank' });
  });

  it('rejects a line that is not JSON with INVALID_JSON', () => {
    expect(read('{"externalId":')).toMatchObject({ kind: 'rejected', code: LineErrors.INVALID_JSON });
  });

  it('rejects bytes that are not UTF-8 with INVALID_UTF8', () => {
    expect(read(Buffer.from([0x7b, 0xff, 0x7d]))).toMatchObject({ kind: 'rejected', code: LineErrors.INVALID_UTF8 });
  });

  it('rejects a missing field, an over-long external id, an unknown field and text PostgreSQL cannot store, naming the field', () => {
    const cases = [
      ['{"externalId":"e","title":"t"}', 'line.dataUri'],
      [JSON.stringify({ externalId: 'e'.repeat(257), title: 't', dataUri: 's3://b/d' }), 'line.externalId'],
      ['{"externalId":"e","title":"t","dataUri":"s3://b/d","priority":1}', 'line '],
      ['{"externalId":"a\\u0000b","title":"t","dataUri":"s3://b/d"}', 'line.externalId'],
      ['{"externalId":"e","title":"t","dataUri":"javascript:alert(1)"}', 'line.dataUri'],
      ['[1,2]', 'line '],
    ] as const;
    for (const [line, named] of cases) {
      const verdict = readLine({ number: 1, bytes: Buffer.from(line) }, 1024);
      expect(verdict, line).toMatchObject({ kind: 'rejected', code: LineErrors.VALIDATION_FAILED });
      expect(verdict.kind === 'rejected' && verdict.message, line).toContain(named);
    }
  });

  it('gives every rejection a message PostgreSQL can store, whatever the line quotes: NUL, UTF-16 text, a key with NUL, an emoji cut in half', () => {
    const nasty = [
      'abc\u0000def',
      Buffer.from('{"externalId":"x"}', 'utf16le').toString('latin1'),
      '{"externalId":"e","title":"t","dataUri":"s3://b/d","x\\u0000y":1}',
      `{"externalId":"${'🐱'.repeat(200)}`,
      `${'🐱'.repeat(149)}x`,
    ];
    for (const line of nasty) {
      const verdict = readLine({ number: 1, bytes: Buffer.from(line) }, 100_000);
      expect(verdict.kind, JSON.stringify(line)).toBe('rejected');
      if (verdict.kind === 'rejected') expect(isStorableText(verdict.message), `${JSON.stringify(line)} → ${JSON.stringify(verdict.message)}`).toBe(true);
    }
  });

  it('rejects a line holding a string longer than any field before parsing it, since lines of long keys of one length make JSON.parse quadratic', () => {
    const longKey = (n: number) => `{"${String(n).padStart(8, '0')}${'k'.repeat(60_000)}":1,"externalId":"e","title":"t","dataUri":"s3://b/d"}`;
    for (let n = 0; n < 2_000; n++) {
      const verdict = readLine({ number: n + 1, bytes: Buffer.from(longKey(n)) }, 100_000);
      expect(verdict).toMatchObject({ kind: 'rejected', code: LineErrors.VALIDATION_FAILED, message: expect.stringContaining('longer than') });
    }
    // The longest good line passes: a 2,048-character dataUri and a 600-character title, escaped.
    const escaped = JSON.stringify({ externalId: 'e'.repeat(256), title: '\u0001'.repeat(1), dataUri: `s3://b/${'\u00e9'.repeat(1)}${'d'.repeat(2_000)}` });
    expect(hasJsonStringLongerThan(Buffer.from(escaped), MAX_JSON_STRING_BYTES)).toBe(false);
    expect(hasJsonStringLongerThan(Buffer.from(`"${'\\u0041'.repeat(2_048)}"`), MAX_JSON_STRING_BYTES)).toBe(false);
    expect(hasJsonStringLongerThan(Buffer.from(`"${'a'.repeat(MAX_JSON_STRING_BYTES + 1)}"`), MAX_JSON_STRING_BYTES)).toBe(true);
    expect(hasJsonStringLongerThan(Buffer.from(`{"a":"${'\\"'.repeat(MAX_JSON_STRING_BYTES)}"}`), MAX_JSON_STRING_BYTES)).toBe(true);
    expect(hasJsonStringLongerThan(Buffer.from(`"${'a'.repeat(MAX_JSON_STRING_BYTES + 1)}`), MAX_JSON_STRING_BYTES)).toBe(true);
  });

  it('keeps no more of a bad line than its short message, and refuses a title padded past 600 characters before trimming it', () => {
    const verdict = readLine({ number: 1, bytes: Buffer.from(`{"externalId":"e","title":"t","dataUri":"s3://b/d","${'x'.repeat(12_000)}":1}`) }, 100_000);
    expect(verdict).toMatchObject({ kind: 'rejected', code: LineErrors.VALIDATION_FAILED });
    if (verdict.kind === 'rejected') expect(verdict.message.length).toBeLessThanOrEqual(500);
    expect(read(JSON.stringify({ externalId: 'e', title: `cat${' '.repeat(598)}`, dataUri: 's3://b/d' }))).toMatchObject({ kind: 'rejected', code: LineErrors.VALIDATION_FAILED });
    expect(readLine({ number: 1, bytes: Buffer.from(JSON.stringify({ externalId: 'e', title: `  cat${' '.repeat(590)}`, dataUri: 's3://b/d' })) }, 100_000)).toMatchObject({ kind: 'task', task: { title: 'cat' } });
  });

  it('rejects a line over the cap with LINE_TOO_LONG and its length', () => {
    expect(readLine({ number: 3, tooLong: { bytes: 100, sha256: Buffer.alloc(32) } }, 64)).toEqual({ kind: 'rejected', code: LineErrors.LINE_TOO_LONG, message: 'line is 100 bytes, more than the 64 allowed' });
  });
});

describe('the prefix digest', () => {
  const digestOf = (chunks: readonly string[], max = 64) => {
    const d = createPrefixDigest();
    for (const line of split(chunks, max)) d.add(line);
    return d.digest();
  };

  it('is the same for the same lines, with or without a final newline, with LF or CRLF', () => {
    expect(digestOf(['a\nb\n'])).toBe(digestOf(['a\r\nb']));
    expect(digestOf(['a\nb\n'])).not.toBe(digestOf(['a\nc\n']));
  });

  it('tells over-long lines apart by their content', () => {
    expect(digestOf(['x'.repeat(100)])).not.toBe(digestOf(['y'.repeat(100)]));
    expect(digestOf(['x'.repeat(100)])).toBe(digestOf(['x'.repeat(40), 'x'.repeat(60), '\n']));
  });

  it('can be read in the middle and go on', () => {
    const d = createPrefixDigest();
    expect(d.digest()).toBe(EMPTY_PREFIX);
    const [first, second] = split(['a\nb\n']);
    d.add(first!);
    const middle = d.digest();
    d.add(second!);
    expect(middle).toBe(digestOf(['a']));
    expect(d.digest()).toBe(digestOf(['a\nb']));
  });
});
