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

  it('decodes a LabelSubmitted of any known version to the newest shape, v1 with durationMs null', () => {
    const label = { ...event, producer: 'label-svc', type: 'LabelSubmitted', payload: { annotatorId: 'alice', annotations: [{ label: 'cat' }] } };
    const decodeLabel = (value: unknown) => decodeMessage(TopicSchemas.label, { ...message(json(value)), topic: 'labelflow.label-events' });
    const newest = { ...label, version: 2, payload: { ...label.payload, durationMs: null } };

    expect(decodeLabel(label)).toEqual({ ok: true, event: newest });
    expect(decodeLabel(newest)).toEqual({ ok: true, event: newest });
  });

  it('returns VERSION_UNSUPPORTED naming the type, its version and the newest known for an event newer than the contracts', () => {
    const decoded = decodeMessage(TopicSchemas.label, {
      ...message(json({ ...event, producer: 'label-svc', type: 'LabelSubmitted', version: 3, payload: { annotatorId: 'alice', shape: 'unknown here' } })),
      topic: 'labelflow.label-events',
    });

    expect(decoded).toEqual({
      ok: false,
      reason: { code: MessagingErrors.VERSION_UNSUPPORTED, message: 'LabelSubmitted version 3 is newer than this consumer knows (up to version 2); replay it once the consumer is upgraded' },
    });
  });

  it('returns VERSION_UNSUPPORTED for a newer version of an event that has only ever had one', () => {
    expect(decode(message(json({ ...event, version: 2 })))).toMatchObject({ ok: false, reason: { code: MessagingErrors.VERSION_UNSUPPORTED, message: expect.stringContaining('TaskAssigned version 2') } });
  });

  it('returns TYPE_UNSUPPORTED, apart from garbage, for a well-formed event of a type its topic does not list yet', () => {
    expect(decode(message(json({ ...event, type: 'TaskPaused', payload: { until: 'later' } })))).toEqual({
      ok: false,
      reason: {
        code: MessagingErrors.TYPE_UNSUPPORTED,
        message: expect.stringMatching(/^TaskPaused is an event type this consumer does not know \(its topic carries TaskCreated, TaskAssigned, .*\); replay it once the consumer is upgraded/),
      },
    });
  });

  it('keeps SCHEMA_INVALID for an unknown type whose envelope is garbage too', () => {
    expect(decode(message(json({ type: 'TaskPaused' })))).toMatchObject({ ok: false, reason: { code: MessagingErrors.SCHEMA_INVALID } });
    expect(decode(message(json({ ...event, type: 'TaskPaused', attempt: 0 })))).toMatchObject({ ok: false, reason: { code: MessagingErrors.SCHEMA_INVALID } });
  });

  it('refuses a value holding a string longer than any event field as DECODE_FAILED before parsing it, since long keys of one length make JSON.parse quadratic', () => {
    const keys = Array.from({ length: 3 }, (_, n) => `"${n}${'k'.repeat(16_383)}":1`).join(',');
    expect(decode(message(Buffer.from(`{${keys}}`)))).toEqual({ ok: false, reason: { code: MessagingErrors.DECODE_FAILED, message: 'value holds a string over 16383 bytes, longer than any field of any event' } });
    expect(decode(message(json(event)))).toMatchObject({ ok: true });
  });

  it('reads header values as strings, takes the first of repeated ones and treats null values as absent', () => {
    expect(headersToStrings({ a: Buffer.from('x'), b: 'y', c: [Buffer.from('1'), Buffer.from('2')], d: null, e: [null], f: undefined })).toEqual({ a: 'x', b: 'y', c: '1' });
    expect(headersToStrings(undefined)).toEqual({});
  });
});
