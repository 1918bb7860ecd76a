import { describe, expect, it } from 'vitest';
import { serializeOutboxRows, type OutboxMessage } from './index';

const message = (over: Partial<OutboxMessage> = {}): OutboxMessage => ({
  topic: 'lf.task-events',
  key: '7391122347125620736',
  eventId: '7391122347129815040',
  eventType: 'TaskCreated',
  payload: { title: 'a line\nwith \u001e, \u001f and "quotes"', n: 1 },
  headers: { 'event-type': 'TaskCreated' },
  ...over,
});

/** The rows read back as PostgreSQL cuts them apart: RS between rows, US between fields. */
const fieldsOf = (rows: Buffer) => rows.toString('utf8').split('\x1e').map((r) => r.split('\x1f'));

describe('outbox rows as framed UTF-8 text', () => {
  it('frames each row as its plain fields, its headers and its payload, the JSON as JSON.stringify wrote it', () => {
    const m = message();
    expect(fieldsOf(serializeOutboxRows([m]))).toEqual([[m.eventId, m.topic, m.key, m.eventType, JSON.stringify(m.headers), JSON.stringify(m.payload)]]);
  });

  it('keeps separators inside payloads and headers escaped, so rows and fields split where they should', () => {
    const rows = [message({ headers: { note: '\x1e\x1f' } }), message({ key: '2' })];
    const fields = fieldsOf(serializeOutboxRows(rows));
    expect(fields.map((f) => f.length)).toEqual([6, 6]);
    expect(JSON.parse(fields[0]![4]!)).toEqual(rows[0]!.headers);
    expect(JSON.parse(fields[1]![5]!)).toEqual(rows[1]!.payload);
  });

  it('writes text beyond Latin-1 as UTF-8, however many rows outgrow the first buffer', () => {
    const rows = Array.from({ length: 50 }, (_, i) => message({ key: String(i), payload: { title: `標注 ${'🏷️'.repeat(200)} ${i}` } }));
    const fields = fieldsOf(serializeOutboxRows(rows));
    expect(fields.map((f) => f[2])).toEqual(rows.map((r) => r.key));
    expect(fields.map((f) => JSON.parse(f[5]!) as unknown)).toEqual(rows.map((r) => r.payload));
  });

  it('is empty for no messages', () => {
    expect(serializeOutboxRows([])).toHaveLength(0);
  });

  it('refuses a key, topic, type or event id holding a separator, naming the field', () => {
    expect(() => serializeOutboxRows([message({ key: 'a\x1eb' })])).toThrow(expect.objectContaining({ code: 'OUTBOX_ROW_INVALID', message: expect.stringContaining('key') }));
    expect(() => serializeOutboxRows([message({ topic: 'a\x1fb' })])).toThrow(expect.objectContaining({ code: 'OUTBOX_ROW_INVALID', message: expect.stringContaining('topic') }));
  });
});
