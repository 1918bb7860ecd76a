import { describe, expect, it } from 'vitest';
import { publishedAtOf } from './reactions';

const consumed = new Date('2030-01-01T00:00:10.000Z');

describe('saga monitor: when an event reached its topic', () => {
  it('is its Kafka timestamp', () => {
    expect(publishedAtOf(Date.parse('2030-01-01T00:00:07.000Z'), consumed)).toBe('2030-01-01T00:00:07.000Z');
  });

  it('is never after the monitor read it, so a relay whose clock runs ahead cannot push deadlines out', () => {
    expect(publishedAtOf(Date.parse('2030-01-01T01:00:00.000Z'), consumed)).toBe(consumed.toISOString());
    expect(publishedAtOf(8.64e15, consumed)).toBe(consumed.toISOString());
    expect(publishedAtOf(Number.MAX_VALUE, consumed)).toBe(consumed.toISOString());
  });

  it('is unknown when the producer left the timestamp out', () => {
    expect(publishedAtOf(-1, consumed)).toBeUndefined();
    expect(publishedAtOf(Number.NaN, consumed)).toBeUndefined();
  });
});
