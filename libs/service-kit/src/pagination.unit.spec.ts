import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { HttpError } from './errors';
import { decodeCursor, encodeCursor, keysetPage, page, PageQuery } from './pagination';

const Position = z.object({ createdAt: z.string(), taskId: z.string() });
const b64 = (text: string) => Buffer.from(text, 'utf8').toString('base64url');

const rejection = (cursor: string): HttpError => {
  try {
    decodeCursor(Position, cursor);
  } catch (error) {
    return error as HttpError;
  }
  throw new Error('expected decodeCursor to throw');
};

describe('service-kit: cursors', () => {
  it('decodes what it encoded, including text outside ASCII', () => {
    const position = { createdAt: '2024-05-01T10:00:00.123456Z', taskId: 'tâche-é-✓' };
    const cursor = encodeCursor(position);
    expect(cursor).toMatch(/^[A-Za-z0-9_-]+$/);
    expect(decodeCursor(Position, cursor)).toEqual(position);
  });

  it('refuses with a 400 a cursor on which the schema\'s own refinement throws', () => {
    // zod 4 runs a refinement even after the pattern before it failed: BigInt('abc') throws.
    const schema = z.object({ afterId: z.string().regex(/^\d+$/).refine((id) => BigInt(id) > 0n) });
    expect(() => decodeCursor(schema, encodeCursor({ afterId: 'abc' }))).toThrow(expect.objectContaining({ status: 400, code: 'CURSOR_INVALID' }));
  });

  it('returns the parsed value, so schema transforms and defaults apply', () => {
    const schema = z.object({ afterId: z.coerce.string(), n: z.number().default(3) });
    expect(decodeCursor(schema, encodeCursor({ afterId: 42 }))).toEqual({ afterId: '42', n: 3 });
  });

  it.each([
    ['an empty string', ''],
    ['characters outside base64url', 'eyJh*IjoxfQ'],
    ['standard base64 padding', `${b64('{"createdAt":"x","taskId":"y"}')}=`],
    ['a non-canonical encoding of the same bytes', b64('{}').replace(/.$/, (c) => String.fromCharCode(c.charCodeAt(0) + 1))],
    ['bytes that are not UTF-8', Buffer.from([0xff, 0xfe, 0x7b, 0x7d]).toString('base64url')],
    ['text that is not JSON', b64('not json')],
    ['JSON of the wrong shape', b64('{"createdAt":"x"}')],
    ['JSON that is not an object', b64('null')],
    ['a cursor over 512 characters', encodeCursor({ createdAt: 'x'.repeat(400), taskId: 'y' })],
    ['a NUL in a string, which PostgreSQL cannot store', b64('{"createdAt":"x","taskId":"\\u0000"}')],
    ['a lone surrogate in a string', b64('{"createdAt":"x","taskId":"\\ud800"}')],
    ['a NUL in a key', b64('{"createdAt":"x","taskId":"y","\\u0000":1}')],
  ])('refuses %s with a 400 CURSOR_INVALID', (_, cursor) => {
    const error = rejection(cursor);
    expect(error).toBeInstanceOf(HttpError);
    expect(error).toMatchObject({ status: 400, code: 'CURSOR_INVALID' });
  });
});

describe('service-kit: page query', () => {
  const Query = z.object({ ...PageQuery });

  it('defaults the limit to 100 and leaves the cursor out', () => {
    expect(Query.parse({})).toEqual({ limit: 100 });
  });

  it('coerces a query-string limit and keeps the cursor', () => {
    expect(Query.parse({ limit: '25', cursor: 'abc' })).toEqual({ limit: 25, cursor: 'abc' });
  });

  it.each([['0'], ['1001'], ['2.5'], ['ten'], ['0x10'], ['1e2'], [' 7'], [''], [['1', '2']]])('refuses the limit %j', (limit) => {
    expect(Query.safeParse({ limit }).success).toBe(false);
  });

  it('refuses a cursor over 512 characters before anyone decodes it', () => {
    expect(Query.safeParse({ cursor: 'a'.repeat(513) }).success).toBe(false);
  });
});

describe('service-kit: pages', () => {
  const rows = [1, 2, 3, 4];

  it('returns limit rows and the position of the last when the query found one more', () => {
    expect(keysetPage(rows, 3, (n) => ({ after: n }))).toEqual({ items: [1, 2, 3], next: { after: 3 } });
  });

  it('has no next position when the rows fit in the page, even exactly', () => {
    expect(keysetPage(rows, 4, (n) => ({ after: n }))).toEqual({ items: rows, next: null });
    expect(keysetPage(rows, 10, (n) => ({ after: n }))).toEqual({ items: rows, next: null });
    expect(keysetPage([], 10, (n) => ({ after: n }))).toEqual({ items: [], next: null });
  });

  it('encodes the next position as a cursor decodeCursor accepts', () => {
    const result = page(rows, 2, (n) => ({ after: n }));
    expect(result.items).toEqual([1, 2]);
    expect(decodeCursor(z.object({ after: z.number() }), result.nextCursor!)).toEqual({ after: 2 });
    expect(page(rows, 4, (n) => ({ after: n })).nextCursor).toBeNull();
  });
});
