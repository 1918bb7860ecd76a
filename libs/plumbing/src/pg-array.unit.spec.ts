import { describe, expect, it } from 'vitest';
import { pgArray } from './pg-array';

describe('pgArray', () => {
  it('quotes every element and writes absent ones as NULL', () => {
    expect(pgArray(['a', null, 'b c', undefined])).toBe('{"a",NULL,"b c",NULL}');
  });

  it('escapes quotes and backslashes so JSON text survives the literal', () => {
    const json = JSON.stringify({ say: 'he said "hi"\\' });
    expect(pgArray([json])).toBe(`{"${json.replace(/\\/g, '\\\\').replace(/"/g, '\\"')}"}`);
  });

  it('writes numbers, booleans, bigints and dates as the text PostgreSQL reads back', () => {
    expect(pgArray([1, 2.5, true, false, 12345678901234567890n, new Date('2026-01-02T03:04:05.678Z')])).toBe('{"1","2.5","true","false","12345678901234567890","2026-01-02T03:04:05.678Z"}');
  });

  it('writes an object element as its JSON, as node-postgres would', () => {
    expect(pgArray([{ a: 1 }])).toBe('{"{\\"a\\":1}"}');
  });

  it('writes an empty array as {}', () => {
    expect(pgArray([])).toBe('{}');
  });
});
