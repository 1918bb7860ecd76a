import type { IHeaders } from 'kafkajs';
import { describe, expect, it } from 'vitest';
import { headerStrings } from './dead-letters';

describe('a letter\'s headers, read as strings', () => {
  it('takes the first value of a repeated header and leaves out one sent with a null value', () => {
    const headers = { 'event-type': Buffer.from('QaPassed'), twice: [Buffer.from('a'), Buffer.from('b')], empty: null, gone: undefined } as unknown as IHeaders;
    expect(headerStrings(headers)).toEqual({ 'event-type': 'QaPassed', twice: 'a' });
    expect(headerStrings(undefined)).toEqual({});
  });
});
