import { describe, expect, it } from 'vitest';
import type { Queryable } from './db';
import { createEmitter, type EventDraft } from './events';

/** Records the statements the outbox would run; the emitter's checks are pure logic. */
const recordingTx = () => {
  const statements: string[] = [];
  const params: unknown[][] = [];
  const tx: Queryable = { query: async (sql: string, values?: unknown[]) => (statements.push(sql), params.push(values ?? []), { rows: [], rowCount: 0 }) };
  return { tx, statements, params };
};
/** The outbox rows of an `appendRowsSql` parameter, read back (RS between rows, US between fields). */
const outboxRows = (rows: Buffer) =>
  rows.toString('utf8').split('\x1e').map((row) => {
    const [eventId, topic, key, eventType, headers, payload] = row.split('\x1f');
    return { eventId, topic, key, eventType, headers: JSON.parse(headers ?? 'null') as unknown, payload: JSON.parse(payload ?? 'null') as unknown };
  });
const { emit, emitMany, prepare } = createEmitter({ producer: 'task-svc', topicPrefix: 'lf', channel: 'outbox', now: () => new Date('2026-01-01T00:00:00Z'), newId: () => '7391122347129815040' });
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

  it('writes exactly the envelope, the causation only when there is one, and the trace beside the type and version headers', async () => {
    const { tx, params } = recordingTx();
    const stray = { ...cancelled('ops'), note: 'not part of the contract' } as unknown as EventDraft;
    const traceparent = '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01';
    const [caused, uncaused] = await emitMany(tx, [
      { drafts: [stray], causationId: 'key-1', trace: { traceparent } },
      { drafts: [cancelled('ops')], trace: {} },
    ]);
    const envelope = {
      id: '7391122347129815040',
      type: 'TaskCancelled',
      version: 1,
      taskId: '7391122347125620736',
      projectId: '22222222-2222-4222-8222-222222222222',
      attempt: 1,
      occurredAt: '2026-01-01T00:00:00.000Z',
      producer: 'task-svc',
      payload: { reason: 'withdrawn', cancelledBy: 'ops', previousStatus: 'open' },
    };
    expect(Object.keys(caused!).sort()).toEqual([...Object.keys(envelope), 'causationId'].sort());
    expect(caused).toEqual({ ...envelope, causationId: 'key-1' });
    expect(Object.keys(uncaused!).sort()).toEqual(Object.keys(envelope).sort());
    const rows = outboxRows(params[0]![0] as Buffer);
    expect(rows.map((r) => r.headers)).toEqual([
      { traceparent, 'event-type': 'TaskCancelled', 'event-version': '1' },
      { 'event-type': 'TaskCancelled', 'event-version': '1' },
    ]);
    expect(rows.map((r) => [r.key, r.eventType])).toEqual([
      ['7391122347125620736', 'TaskCancelled'],
      ['7391122347125620736', 'TaskCancelled'],
    ]);
  });

  it('refuses an event its consumers could not read, and appends nothing', async () => {
    const { tx, statements } = recordingTx();
    await expect(emit(tx, [cancelled('a'.repeat(129))])).rejects.toMatchObject({ code: 'EVENT_INVALID', message: expect.stringContaining('payload.cancelledBy') });
    expect(statements).toEqual([]);
  });

  it('refuses a field its event does not declare, also deep in the payload, since readers would drop it without a word', async () => {
    const { tx, statements } = recordingTx();
    const withExtra = { ...cancelled('ops'), payload: { reason: 'withdrawn', cancelledBy: 'ops', previousStatus: 'open', refundTo: 'ann-9' } } as unknown as EventDraft;
    await expect(emit(tx, [withExtra])).rejects.toMatchObject({ code: 'EVENT_INVALID', message: 'TaskCancelled version 1 does not declare payload.refundTo: a new field is a new version of the event (libs/contracts)' });
    const label = (annotations: unknown, version: 1 | 2 = 2) =>
      ({ type: 'LabelSubmitted', version, taskId: '7391122347125620736', projectId: '22222222-2222-4222-8222-222222222222', attempt: 1, payload: { annotatorId: 'ann-1', annotations, ...(version === 2 ? { durationMs: null } : {}) } }) as unknown as EventDraft;
    await expect(emit(tx, [label([{ label: 'cat', confidence: 0.9, polygon: [1, 2] }])])).rejects.toMatchObject({ code: 'EVENT_INVALID', details: ['payload.annotations.0.polygon'] });
    expect(statements).toEqual([]);
    // An optional field left undefined is not sent, and an older version sent as it is stays valid.
    await expect(emit(tx, [{ ...cancelled('ops'), payload: { ...cancelled('ops').payload, extra: undefined } } as unknown as EventDraft])).resolves.toHaveLength(1);
    await expect(emit(tx, [label([{ label: 'cat' }], 1)])).resolves.toEqual([expect.objectContaining({ version: 1 })]);
    // A field of a newer version is undeclared in an older one, though the upcast adds it.
    const v1WithDuration = { ...label([{ label: 'cat' }], 1), payload: { annotatorId: 'ann-1', annotations: [{ label: 'cat' }], durationMs: 5_000 } } as unknown as EventDraft;
    await expect(emit(tx, [v1WithDuration])).rejects.toMatchObject({ code: 'EVENT_INVALID', details: ['payload.durationMs'] });
  });

  it('prepares events as rows for a statement of the caller, the same rows emit writes, in order', async () => {
    const ids = ['7391122347129815041', '7391122347129815042'];
    const { prepare: prepareNumbered } = createEmitter({ producer: 'task-svc', topicPrefix: 'lf', channel: 'outbox', now: () => new Date('2026-01-01T00:00:00Z'), newId: () => ids.shift() ?? 'none' });
    const prepared = await prepareNumbered([cancelled('ops-a'), cancelled('ops-b')], 'import:1');
    expect(prepared.events.map((e) => [e.id, e.causationId])).toEqual([
      ['7391122347129815041', 'import:1'],
      ['7391122347129815042', 'import:1'],
    ]);
    expect(prepared.outbox.channel).toBe('outbox');
    const rows = outboxRows(prepared.outbox.rows);
    expect(rows.map((r) => r.eventId)).toEqual(['7391122347129815041', '7391122347129815042']);
    expect(rows.map((r) => r.payload)).toEqual(prepared.events);

    const viaEmit = recordingTx();
    await emit(viaEmit.tx, [cancelled('ops-a')], 'import:1');
    const [emitted] = outboxRows(viaEmit.params[0]![0] as Buffer);
    expect({ ...rows[0], eventId: 'x', payload: null }).toEqual({ ...emitted, eventId: 'x', payload: null });
    expect(rows[0]).toMatchObject({ topic: 'lf.task-events', key: '7391122347125620736', eventType: 'TaskCancelled', headers: { 'event-type': 'TaskCancelled', 'event-version': '1' } });
  });

  it('refuses to prepare an event its consumers could not read, before any transaction', async () => {
    await expect(prepare([cancelled('ops'), cancelled('a'.repeat(129))])).rejects.toMatchObject({ code: 'EVENT_INVALID' });
  });

  it("checks only the first draft when told the builder's input was validated already, and refuses a first draft that is wrong", async () => {
    const prepared = await prepare([cancelled('ops'), cancelled('a'.repeat(129))], 'import:1', { check: 'first' });
    expect(prepared.events).toHaveLength(2);
    await expect(prepare([cancelled('a'.repeat(129)), cancelled('ops')], 'import:1', { check: 'first' })).rejects.toMatchObject({ code: 'EVENT_INVALID' });
  });
});
