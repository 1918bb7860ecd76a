import { describe, expect, it } from 'vitest';
import { joinOutboxRows, serializeOutboxRow, serializeOutboxRows, type OutboxMessage } from './index';

const message = (over: Partial<OutboxMessage> = {}): OutboxMessage => ({
  topic: 'lf.task-events',
  key: '7391122347125620736',
  eventId: '7391122347129815040',
  eventType: 'TaskCreated',
  payload: { title: 'a line\nwith \u001e, \u001f and "quotes"', n: 1 },
  headers: { 'event-type': 'TaskCreated' },
  ...over,
});

describe('outbox rows as text', () => {
  it('frames each row as its plain fields, its headers and its payload, the JSON as JSON.stringify wrote it', () => {
    const m = message();
    expect(serializeOutboxRow(m).split('\x1f')).toEqual([m.eventId, m.topic, m.key, m.eventType, JSON.stringify(m.headers), JSON.stringify(m.payload)]);
  });

  it('keeps separators inside payloads and headers escaped, so rows and fields split where they should', () => {
    const rows = [message({ headers: { note: '\x1e\x1f' } }), message({ key: '2' })];
    const text = serializeOutboxRows(rows);
    expect(text).toBe(joinOutboxRows(rows.map(serializeOutboxRow)));
    expect(text.split('\x1e').map((r) => r.split('\x1f').length)).toEqual([6, 6]);
    expect(JSON.parse(text.split('\x1e')[0]!.split('\x1f')[5]!)).toEqual(rows[0]!.payload);
  });

  it('refuses a key, topic, type or event id holding a separator, naming the field', () => {
    expect(() => serializeOutboxRow(message({ key: 'a\x1eb' }))).toThrow(expect.objectContaining({ code: 'OUTBOX_ROW_INVALID', message: expect.stringContaining('key') }));
    expect(() => serializeOutboxRow(message({ topic: 'a\x1fb' }))).toThrow(expect.objectContaining({ code: 'OUTBOX_ROW_INVALID', message: expect.stringContaining('topic') }));
  });
});
