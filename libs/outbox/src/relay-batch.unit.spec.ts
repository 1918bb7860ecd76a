import { describe, expect, it } from 'vitest';
import { MESSAGE_OVERHEAD_BYTES, sizeOf, take, type Pending } from './relay-batch';

const row = (id: number, bytes: number, held = false): Pending => ({ id: String(id), message: { topic: 't', key: `k${id}`, value: 'x', headers: {} }, bytes, held });

describe('batching outbox rows by bytes', () => {
  it('counts value, key, header names and values in UTF-8 bytes, plus the framing', () => {
    expect(sizeOf({ topic: 't', key: 'ké', value: '€', headers: { 'event-type': 'TaskCreated' } })).toBe(3 + 3 + 10 + 11 + MESSAGE_OVERHEAD_BYTES);
  });

  it('takes rows off the front until the next one would pass the byte limit, leaving the rest in the window', () => {
    const window = [row(1, 40), row(2, 40), row(3, 40)];
    expect(take(window, 10, 100).batch.map((r) => r.id)).toEqual(['1', '2']);
    expect(window.map((r) => r.id)).toEqual(['3']);
  });

  it('takes a row larger than the limit alone rather than never sending it', () => {
    const window = [row(1, 500), row(2, 10)];
    expect(take(window, 10, 100).batch.map((r) => r.id)).toEqual(['1']);
    expect(take(window, 10, 100).batch.map((r) => r.id)).toEqual(['2']);
  });

  it('stops at the row limit whatever the bytes', () => {
    const window = [row(1, 1), row(2, 1), row(3, 1)];
    expect(take(window, 2, 1_000).batch).toHaveLength(2);
  });

  it('hands back the held rows it meets on the way, to be parked instead of sent', () => {
    const window = [row(1, 10), row(2, 10, true), row(3, 10)];
    const { batch, held } = take(window, 10, 100);
    expect(batch.map((r) => r.id)).toEqual(['1', '3']);
    expect(held.map((r) => r.id)).toEqual(['2']);
    expect(window).toEqual([]);
  });
});
