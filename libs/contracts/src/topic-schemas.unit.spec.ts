import { describe, expect, it } from 'vitest';
import { TaskId } from './ids';
import { TopicSchemas } from './topics';

const envelope = {
  id: '7391122347129815040',
  taskId: '7391122347125620736',
  projectId: '22222222-2222-4222-8222-222222222222',
  attempt: 1,
  occurredAt: '2025-01-01T12:00:00.000Z',
  producer: 'billing-svc',
  version: 1,
};
const billingCompleted = { ...envelope, type: 'BillingCompleted', payload: { annotatorId: 'alice', amount: 500 } };
const without = <T extends object, K extends keyof T>(value: T, key: K): Omit<T, K> => {
  const { [key]: _dropped, ...rest } = value;
  return rest;
};

describe('contracts: per-topic event unions', () => {
  it.each([
    ['task', { ...envelope, producer: 'task-svc', type: 'TaskCreated', payload: { title: 'Cats', dataUri: 's3://bucket/cat.png' } }],
    ['label', { ...envelope, producer: 'label-svc', type: 'LabelSubmitted', payload: { annotatorId: 'alice', annotations: [{ label: 'cat', confidence: 0.5 }] } }],
    ['qa', { ...envelope, producer: 'qa-svc', causationId: 'abc', type: 'QaRejected', payload: { annotatorId: 'alice', reviewerId: 'rev-1', reason: 'blurry' } }],
    ['billing', billingCompleted],
  ] as const)('accepts a valid %s event', (topic, event) => {
    expect(TopicSchemas[topic].safeParse(event).success).toBe(true);
  });

  it('refuses a task number longer than an index row can hold and a previous status PostgreSQL cannot store, which would fail their batch at every retry', () => {
    const created = (taskNumber: string) => TopicSchemas.task.safeParse({ ...envelope, producer: 'task-svc', type: 'TaskCreated', payload: { title: 'Cats', dataUri: 's3://bucket/cat.png', taskNumber } }).success;
    expect(created(`PRJ-${'9'.repeat(16)}`)).toBe(true);
    expect(created(`PRJ-${'9'.repeat(17)}`)).toBe(false);
    expect(created(`PRJ-1${'0'.repeat(100_000)}`)).toBe(false);
    const cancelled = (previousStatus: string) =>
      TopicSchemas.task.safeParse({ ...envelope, producer: 'task-svc', type: 'TaskCancelled', payload: { reason: 'dup', cancelledBy: 'ops-1', previousStatus } }).success;
    expect(cancelled('ASSIGNED')).toBe(true);
    expect(cancelled('ASSIGNED\u0000')).toBe(false);
  });

  it('hands out parsed events read-only to the leaf: the payload and its annotations cannot be changed by a consumer', () => {
    const parsed = TopicSchemas.label.parse({ ...envelope, version: 2, producer: 'label-svc', type: 'LabelSubmitted', payload: { annotatorId: 'alice', annotations: [{ label: 'cat' }], durationMs: null } });
    if (parsed.type !== 'LabelSubmitted') throw new Error('expected LabelSubmitted');
    // @ts-expect-error the payload is read-only
    expect(() => (parsed.payload.annotatorId = 'mallory')).toThrow(TypeError);
    // @ts-expect-error the annotations are a read-only array
    expect(() => parsed.payload.annotations.push({ label: 'dog' })).toThrow(TypeError);
    // @ts-expect-error each annotation is read-only
    expect(() => (parsed.payload.annotations[0]!.label = 'dog')).toThrow(TypeError);
    expect(parsed.payload).toEqual({ annotatorId: 'alice', annotations: [{ label: 'cat' }], durationMs: null });
  });

  it('rejects an event without a projectId', () => {
    const result = TopicSchemas.billing.safeParse(without(billingCompleted, 'projectId'));

    expect(result.success).toBe(false);
    expect(result.error?.issues.map((i) => i.path.join('.'))).toContain('projectId');
  });

  it('rejects an event whose version is not a version its type has', () => {
    expect(TopicSchemas.billing.safeParse({ ...billingCompleted, version: 2 }).success).toBe(false);
    expect(TopicSchemas.billing.safeParse({ ...billingCompleted, version: 0 }).success).toBe(false);
  });

  it('rejects an event type the topic does not carry', () => {
    expect(TopicSchemas.billing.safeParse({ ...billingCompleted, type: 'BillingRefunded' }).success).toBe(false);
    expect(TopicSchemas.task.safeParse({ ...billingCompleted }).success).toBe(false);
  });

  it('rejects attempt 0, since attempts start at 1', () => {
    expect(TopicSchemas.billing.safeParse({ ...billingCompleted, attempt: 0 }).success).toBe(false);
  });

  it('rejects a BillingCompleted whose amount is not integer minor units', () => {
    const result = TopicSchemas.billing.safeParse({ ...billingCompleted, payload: { annotatorId: 'alice', amount: 4.99 } });

    expect(result.success).toBe(false);
    expect(result.error?.issues.map((i) => i.path.join('.'))).toContain('payload.amount');
  });
});

describe('contracts: ids', () => {
  it('accepts 64-bit decimal task and event ids and rejects UUIDs, zero, leading zeros and overflow', () => {
    expect(TaskId.safeParse('7391122347125620736').success).toBe(true);
    expect(TaskId.safeParse('9223372036854775807').success).toBe(true);
    for (const bad of ['11111111-1111-4111-8111-111111111111', '0', '0123', '9223372036854775808', '', '12a']) expect(TaskId.safeParse(bad).success, bad).toBe(false);
  });
});
