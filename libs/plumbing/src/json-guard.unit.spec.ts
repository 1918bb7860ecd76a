import { describe, expect, it } from 'vitest';
import { hasJsonStringLongerThan, V8_LENGTH_HASHED_STRING } from './json-guard';

const bytes = (s: string) => Buffer.from(s);

describe('the JSON string guard', () => {
  it('finds a key or a value longer than the bound, escapes counted as written', () => {
    expect(hasJsonStringLongerThan(bytes(`{"${'k'.repeat(101)}":1}`), 100)).toBe(true);
    expect(hasJsonStringLongerThan(bytes(`{"k":"${'v'.repeat(101)}"}`), 100)).toBe(true);
    expect(hasJsonStringLongerThan(bytes(`{"k":"${'\\"'.repeat(51)}"}`), 100)).toBe(true);
    expect(hasJsonStringLongerThan(bytes(`"${'v'.repeat(101)}`), 100)).toBe(true);
  });

  it('passes strings at the bound, however many, and numbers or whitespace between them of any length', () => {
    expect(hasJsonStringLongerThan(bytes(`{"k":"${'v'.repeat(100)}"}`), 100)).toBe(false);
    expect(hasJsonStringLongerThan(bytes(`{"k":"${'\\"'.repeat(50)}"}`), 100)).toBe(false);
    expect(hasJsonStringLongerThan(bytes(`{"${'k'.repeat(99)}":"${'v'.repeat(99)}"}`), 100)).toBe(false);
    expect(hasJsonStringLongerThan(bytes(`[${Array.from({ length: 500 }, () => `"${'x'.repeat(90)}"`).join(',')}]`), 100)).toBe(false);
    expect(hasJsonStringLongerThan(bytes(`{"n":${'1'.repeat(500)},"w":${' '.repeat(500)}2}`), 100)).toBe(false);
    // An escaped quote does not end the string, an escaped backslash before a quote does.
    expect(hasJsonStringLongerThan(bytes(`["${'\\\\'.repeat(10)}","${'a'.repeat(90)}"]`), 100)).toBe(false);
  });

  it('skips the scan for a text too short to hold a string past the bound', () => {
    expect(hasJsonStringLongerThan(bytes(`"${'a'.repeat(50)}`), V8_LENGTH_HASHED_STRING)).toBe(false);
  });
});
