import { describe, expect, it } from 'vitest';
import { MESSAGE_OVERHEAD_BYTES, idBefore, pendingOf, sizeOf, take, type Pending } from './relay-batch';
import { serializeOutboxRows } from './store';

const row = (id: number, bytes: number, held = false): Pending => ({ id: String(id), message: { topic: 't', key: `k${id}`, value: 'x', headers: {} }, bytes, held, ends: 1 });

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

describe('reading a row into the messages to send', () => {
  const plain = { id: '7', topic: 't', key: 'task-a', payload: '{"seq":0}', headers: { 'event-type': 'Test' }, messages: null };
  const frames = serializeOutboxRows([
    { topic: 't', key: 'task-a', eventId: 'e1', eventType: 'Test', payload: { seq: 1 }, headers: { 'event-type': 'Test' } },
    { topic: 'u', key: 'task-b', eventId: 'e2', eventType: 'Other', payload: { seq: 2 } },
  ]).toString();
  const bundle = { ...plain, id: '12', key: 'task-a', payload: 'null', headers: {}, messages: frames };

  it('reads a plain row as one message that ends its row', () => {
    expect(pendingOf(plain, null)).toEqual([{ id: '7', message: { topic: 't', key: 'task-a', value: '{"seq":0}', headers: { 'event-type': 'Test' } }, bytes: sizeOf({ topic: 't', key: 'task-a', value: '{"seq":0}', headers: { 'event-type': 'Test' } }), held: false, ends: 1 }]);
  });

  it("reads a bundle's frames in order, each with its own topic, key and headers, and only the last one ends the row", () => {
    const read = pendingOf(bundle, null);
    expect(read.map((p) => [p.id, p.message.topic, p.message.key, p.message.value, p.message.headers, p.ends])).toEqual([
      ['12', 't', 'task-a', '{"seq":1}', { 'event-type': 'Test' }, 0],
      ['12', 'u', 'task-b', '{"seq":2}', {}, 2],
    ]);
  });

  it('holds a row, a bundle whole, when one of its keys has a parked row before it, and not when the parked row comes after it', () => {
    expect(pendingOf(bundle, { 'task-b': '9' }).map((p) => p.held)).toEqual([true, true]);
    expect(pendingOf(bundle, { 'task-b': '13' }).map((p) => p.held)).toEqual([false, false]);
    expect(pendingOf(plain, { 'task-a': '6' })[0]?.held).toBe(true);
    expect(pendingOf(plain, { 'task-b': '6' })[0]?.held).toBe(false);
  });

  it('compares outbox ids as numbers, not as text', () => {
    expect(idBefore('9', '10')).toBe(true);
    expect(idBefore('10', '9')).toBe(false);
    expect(idBefore('12', '12')).toBe(false);
  });

  it('refuses a bundle frame whose headers are not a JSON object of strings, naming the row', () => {
    const frame = (headers: string) => ['e1', 't', 'task-a', 'Test', headers, '{}'].join('\x1f');
    expect(() => pendingOf({ ...bundle, messages: frame('{not json') }, null)).toThrow(/outbox bundle 12 holds a frame whose headers are not JSON/);
    expect(() => pendingOf({ ...bundle, messages: frame('{"n":1}') }, null)).toThrow(/not an object of strings/);
  });

  it('refuses a bundle frame that does not have six fields, naming the row', () => {
    expect(() => pendingOf({ ...bundle, messages: 'e1\x1ft\x1ftask-a' }, null)).toThrow(/outbox bundle 12 holds a frame of 3 fields/);
  });
});

