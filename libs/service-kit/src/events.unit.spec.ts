import { describe, expect, it } from 'vitest';
import type { Queryable } from './db';
import { createEmitter, type EventDraft } from './events';

/** Records the statements the outbox would run; the emitter's checks are pure logic. */
const recordingTx = () => {
  const statements: string[] = [];
  const tx: Queryable = { query: async (sql: string) => (statements.push(sql), { rows: [], rowCount: 0 }) };
  return { tx, statements };
};
const { emit } = createEmitter({ producer: 'task-svc', topicPrefix: 'lf', channel: 'outbox', now: () => new Date('2026-01-01T00:00:00Z'), newId: () => '7391122347129815040' });
const cancelled = (cancelledBy: string): EventDraft =>
  ({
    type: 'TaskCancelled',
    version: 1,
    taskId: '7391122347125620736',
    projectId: '22222222-2222-4222-8222-222222222222',
    attempt: 1,
    payload: { reason: 'withdrawn', cancelledBy, previousStatus: 'open' },
  }) as EventDraft;

describe('service-kit: createEmitter', () => {
  it('stamps a valid draft and appends it to the outbox', async () => {
    const { tx, statements } = recordingTx();
    const [event] = await emit(tx, [cancelled('ops')], 'key-1');
    expect(event).toMatchObject({ id: '7391122347129815040', producer: 'task-svc', occurredAt: '2026-01-01T00:00:00.000Z', causationId: 'key-1' });
    expect(statements.some((s) => s.includes('INSERT INTO outbox'))).toBe(true);
  });

  it('refuses an event its consumers could not read, and appends nothing', async () => {
    const { tx, statements } = recordingTx();
    await expect(emit(tx, [cancelled('a'.repeat(129))])).rejects.toMatchObject({ code: 'EVENT_INVALID', message: expect.stringContaining('payload.cancelledBy') });
    expect(statements).toEqual([]);
  });
});
