import { describe, expect, it } from 'vitest';
import { TopicSchemas } from '@labelflow/contracts';
import { decodeMessage, headersToStrings, type RawMessage } from './codec';
import { MessagingErrors } from './errors';

const taskId = '7391122347125620736';
const event = {
  id: '7391122347129815040',
  taskId,
  projectId: '22222222-2222-4222-8222-222222222222',
  attempt: 1,
  occurredAt: '2025-01-01T12:00:00.000Z',
  producer: 'task-svc',
  type: 'TaskAssigned',
  version: 1,
  payload: { annotatorId: 'alice' },
};
const message = (value: Buffer | null, key: string | null = taskId): RawMessage => ({
  topic: 'labelflow.task-events',
  partition: 0,
  offset: '42',
  key: key === null ? null : Buffer.from(key),
  value,
  headers: {},
});
const decode = (m: RawMessage) => decodeMessage(TopicSchemas.task, m);
const json = (value: unknown) => Buffer.from(JSON.stringify(value));

describe('messaging: decodeMessage', () => {
  it('decodes a valid event whose key is its taskId', () => {
    expect(decode(message(json(event)))).toEqual({ ok: true, event });
  });

  it('decodes a valid event that carries no key', () => {
    expect(decode(message(json(event), null)).ok).toBe(true);
  });

  it('returns DECODE_FAILED for a missing or empty value', () => {
    expect(decode(message(null))).toMatchObject({ ok: false, reason: { code: MessagingErrors.DECODE_FAILED } });
    expect(decode(message(Buffer.alloc(0)))).toMatchObject({ ok: false, reason: { code: MessagingErrors.DECODE_FAILED } });
  });

  it('returns DECODE_FAILED instead of throwing for bytes that are not JSON', () => {
    const run = () => decode(message(Buffer.from([0xff, 0xfe, 0x7b, 0x00, 0x22])));

    expect(run).not.toThrow();
    expect(run()).toMatchObject({ ok: false, reason: { code: MessagingErrors.DECODE_FAILED } });
  });

  it('returns SCHEMA_INVALID naming the bad field for JSON that does not match the topic schema', () => {
    const decoded = decode(message(json({ ...event, attempt: 0 })));

    expect(decoded).toMatchObject({ ok: false, reason: { code: MessagingErrors.SCHEMA_INVALID } });
    expect(decoded.ok ? '' : decoded.reason.message).toContain('attempt');
  });

  it('returns SCHEMA_INVALID for JSON that is not an object at all', () => {
    expect(decode(message(Buffer.from('null')))).toMatchObject({ ok: false, reason: { code: MessagingErrors.SCHEMA_INVALID } });
  });

  it('rejects a message whose key differs from the event taskId', () => {
    const decoded = decode(message(json(event), '7391122347125620737'));

    expect(decoded).toMatchObject({ ok: false, reason: { code: MessagingErrors.SCHEMA_INVALID } });
  });

  it('reads header values as strings, takes the first of repeated ones and treats null values as absent', () => {
    expect(headersToStrings({ a: Buffer.from('x'), b: 'y', c: [Buffer.from('1'), Buffer.from('2')], d: null, e: [null], f: undefined })).toEqual({ a: 'x', b: 'y', c: '1' });
    expect(headersToStrings(undefined)).toEqual({});
  });
});
