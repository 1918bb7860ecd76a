import { describe, expect, it } from 'vitest';
import { isStorableText } from '@labelflow/contracts';
import { readDeadLetter } from './dead-letters';

const headers = {
  'event-type': 'LabelSubmitted',
  'dlq-error-code': 'SCHEMA_INVALID',
  'dlq-error-message': 'payload.annotations: required',
  'dlq-source-topic': 'lf.label-events',
  'dlq-source-partition': '2',
  'dlq-source-offset': '17',
  'dlq-failed-at': '2030-01-01T00:00:00.000Z',
};

describe('saga monitor: reading a dead letter', () => {
  it('takes the task from the key, the event from the value and the failure from the headers', () => {
    const value = Buffer.from(JSON.stringify({ id: '42', type: 'LabelSubmitted', taskId: '7000000000000000001', projectId: 'C6C7D0A2-1B2C-4D5E-8F90-ABCDEF012345' }));
    expect(readDeadLetter('lf.qa-svc.dlq', 1, { offset: '5', key: Buffer.from('7000000000000000001'), value, headers }, 'lf')).toEqual({
      topic: 'lf.qa-svc.dlq',
      partition: 1,
      offset: '5',
      service: 'qa-svc',
      taskId: '7000000000000000001',
      projectId: 'c6c7d0a2-1b2c-4d5e-8f90-abcdef012345',
      eventId: '42',
      eventType: 'LabelSubmitted',
      code: 'SCHEMA_INVALID',
      reason: 'payload.annotations: required',
      source: 'lf.label-events/2@17',
      failedAt: '2030-01-01T00:00:00.000Z',
    });
  });

  it('keeps a message that is not JSON and has no task key, with what its headers say', () => {
    const read = readDeadLetter('lf.task-svc.dlq', 0, { offset: '9', key: Buffer.from('garbage'), value: Buffer.from('\u0000\u0001'), headers: { 'dlq-error-code': 'DECODE_FAILED' } }, 'lf');
    expect(read).toMatchObject({ service: 'task-svc', taskId: null, projectId: null, eventId: null, eventType: null, code: 'DECODE_FAILED', reason: '', source: null, failedAt: null });
  });

  it('makes every text storable when the letter quotes unreadable bytes, as a JSON error on a NUL does', () => {
    let reason = '';
    try {
      JSON.parse('\u0000garbage from a model worker');
    } catch (error) {
      reason = `value is not JSON: ${(error as Error).message}`;
    }
    expect(isStorableText(reason)).toBe(false);
    const value = Buffer.from(JSON.stringify({ id: 'e\u0000', type: 'Label\u0000Submitted' }));
    const read = readDeadLetter('lf.label-svc.dlq', 0, { offset: '3', key: Buffer.from('\u0000'), value, headers: { ...headers, 'dlq-error-code': 'DECODE\u0000', 'dlq-error-message': reason, 'dlq-source-topic': 'lf.\u0000' } }, 'lf');
    for (const field of [read.eventId, read.eventType, read.code, read.reason, read.source]) expect(isStorableText(field ?? '')).toBe(true);
    expect(read.reason).toContain('value is not JSON');
    expect(read.taskId).toBeNull();
  });

  it('reads a letter holding a string longer than any field by its headers alone, since parsing long keys of one length is quadratic', () => {
    const keys = Array.from({ length: 3 }, (_, n) => `"${n}${'k'.repeat(16_383)}":1`).join(',');
    const value = Buffer.from(`{"type":"Forged","projectId":"22222222-2222-4222-8222-222222222222",${keys}}`);
    const read = readDeadLetter('lf.label-svc.dlq', 0, { offset: '8', key: Buffer.from('7000000000000000001'), value, headers }, 'lf');
    expect(read).toMatchObject({ taskId: '7000000000000000001', projectId: null, eventId: null, eventType: 'LabelSubmitted', code: 'SCHEMA_INVALID' });
  });

  it('leaves no half of a surrogate pair where a long text is cut', () => {
    const read = readDeadLetter('lf.qa-svc.dlq', 0, { offset: '4', key: null, value: null, headers: { ...headers, 'dlq-error-message': `${'x'.repeat(3_999)}😀` } }, 'lf');
    expect(isStorableText(read.reason)).toBe(true);
    expect(read.reason).toHaveLength(4_000);
  });

  it('keeps a failure instant PostgreSQL can read, or none', () => {
    const at = (failedAt: string) => readDeadLetter('lf.qa-svc.dlq', 0, { offset: '4', key: null, value: null, headers: { ...headers, 'dlq-failed-at': failedAt } }, 'lf').failedAt;
    expect(at('1')).toBe(new Date(Date.parse('1')).toISOString());
    expect(at('2030-01-01T01:00:00+01:00')).toBe('2030-01-01T00:00:00.000Z');
    expect(at('yesterday')).toBeNull();
    expect(at('0000-06-01T00:00:00Z')).toBeNull();
    expect(at('0001-01-01T00:00:00+01:00')).toBeNull();
    expect(at('+010000-01-01T00:00:00Z')).toBeNull();
    expect(at('-000001-01-01T00:00:00Z')).toBeNull();
  });
});
