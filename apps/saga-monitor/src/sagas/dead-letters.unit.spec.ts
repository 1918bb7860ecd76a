import { describe, expect, it } from 'vitest';
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
    const value = Buffer.from(JSON.stringify({ id: '42', type: 'LabelSubmitted', taskId: '7000000000000000001' }));
    expect(readDeadLetter('lf.qa-svc.dlq', 1, { offset: '5', key: Buffer.from('7000000000000000001'), value, headers }, 'lf')).toEqual({
      topic: 'lf.qa-svc.dlq',
      partition: 1,
      offset: '5',
      service: 'qa-svc',
      taskId: '7000000000000000001',
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
    expect(read).toMatchObject({ service: 'task-svc', taskId: null, eventId: null, eventType: null, code: 'DECODE_FAILED', reason: '', source: null, failedAt: null });
  });
});
