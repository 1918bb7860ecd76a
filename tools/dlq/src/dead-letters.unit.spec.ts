import type { IHeaders, Kafka } from 'kafkajs';
import { describe, expect, it } from 'vitest';
import { headerStrings, planReplay, replayDeadLetters, toDeadLetter } from './dead-letters';

describe('a letter\'s headers, read as strings', () => {
  it('takes the first value of a repeated header and leaves out one sent with a null value', () => {
    const headers = { 'event-type': Buffer.from('QaPassed'), twice: [Buffer.from('a'), Buffer.from('b')], empty: null, gone: undefined } as unknown as IHeaders;
    expect(headerStrings(headers)).toEqual({ 'event-type': 'QaPassed', twice: 'a' });
    expect(headerStrings(undefined)).toEqual({});
  });
});

const dlq = 'lf.qa-svc.dlq';
const letterAt = (offset: number, headers: Record<string, string> = {}) =>
  toDeadLetter(0, {
    offset: String(offset),
    key: Buffer.from('7000000000000000001'),
    value: Buffer.from('{"type":"QaPassed"}'),
    headers: { 'event-type': 'QaPassed', 'dlq-error-code': 'MESSAGING_HANDLER_FAILED', 'dlq-source-topic': 'lf.qa-events', 'dlq-source-partition': '2', 'dlq-source-offset': String(40 + offset), ...headers },
  });

describe('a dead letter, read', () => {
  it('keeps its source coordinates only when the broker could be asked for them', () => {
    expect(letterAt(0).source).toEqual({ topic: 'lf.qa-events', partition: 2, offset: '40' });
    expect(letterAt(1, { 'dlq-source-partition': 'two' }).source).toBeNull();
    expect(letterAt(2, { 'dlq-source-offset': '-1' }).source).toBeNull();
    expect(letterAt(3, { 'dlq-source-topic': 'no spaces allowed' }).source).toBeNull();
  });

  it('says when it is itself a replay that failed again', () => {
    expect(letterAt(5, { 'dlq-replayed-from': `${dlq}:0:1` }).replayedFrom).toBe(`${dlq}:0:1`);
    expect(letterAt(5).replayedFrom).toBeNull();
  });
});

describe('a replay, planned', () => {
  it('sends a letter once when an earlier replay of it failed again, refuses what cannot be read or has no source, and keeps the rest', () => {
    const original = letterAt(1);
    const again = letterAt(7, { 'dlq-replayed-from': `${dlq}:0:1` });
    const unreadable = letterAt(8, { 'dlq-error-code': 'MESSAGING_DECODE_FAILED', 'dlq-error-message': "value is not JSON: Unexpected token 'x'" });
    const foreign = letterAt(9, { 'dlq-source-topic': '' });
    const { send, refused } = planReplay(dlq, [original, again, unreadable, foreign]);
    expect(send.map((l) => l.id)).toEqual(['0:7']);
    expect(refused.map((r) => [r.id, 'skipped' in r && r.skipped === true])).toEqual([['0:1', true], ['0:8', true], ['0:9', false]]);
  });

  it('replays a letter the consumer could not read for a reason of its own, which an upgrade can fix', () => {
    const buggy = letterAt(3, { 'dlq-error-code': 'MESSAGING_DECODE_FAILED', 'dlq-error-message': 'message could not be read: Cannot read properties of undefined' });
    expect(planReplay(dlq, [buggy]).send).toEqual([buggy]);
  });

  it("sends a message once when this consumer dead-lettered it again on its way back from a replay of another service's letter", () => {
    const taskDlq = 'lf.task-svc.dlq';
    const first = letterAt(1);
    const again = letterAt(2, { 'dlq-source-offset': '41', 'dlq-replayed-from': `${dlq}:0:5` });
    const { send, refused } = planReplay(taskDlq, [first, again]);
    expect(send.map((l) => l.id)).toEqual(['0:2']);
    expect(refused).toEqual([{ id: '0:1', ok: false, skipped: true, reason: 'the newer letter 0:2 carries the same message from lf.qa-events and stands for it: a replay sends each message once' }]);
  });

  it('knows a message by its event id when the copy it came back as has coordinates of its own, and keeps other events apart', () => {
    const as = (offset: number, id: string, headers: Record<string, string> = {}) => ({ ...letterAt(offset, headers), value: Buffer.from(JSON.stringify({ id, type: 'LabelSubmitted' })) });
    const original = as(1, '7000000000000000101');
    const other = as(2, '7000000000000000102');
    const copy = as(3, '7000000000000000101', { 'dlq-replayed-from': `${dlq}:0:9` });
    expect(planReplay('lf.task-svc.dlq', [original, other, copy]).send.map((l) => l.id)).toEqual(['0:2', '0:3']);
    // The newer letter stands for the older one even when another code left it out of the selection.
    expect(planReplay('lf.task-svc.dlq', [original], [original, other, copy]).send).toEqual([]);
  });

  it('leaves out a letter a newer one replays, though the newer one is not selected (another code)', () => {
    const original = letterAt(1);
    const again = letterAt(7, { 'dlq-replayed-from': `${dlq}:0:1`, 'dlq-error-code': 'MESSAGING_SCHEMA_INVALID' });
    expect(planReplay(dlq, [original], [original, again]).send).toEqual([]);
  });
});

describe('a replay, sent', () => {
  it('reports a letter the broker refuses and still sends the ones after it', async () => {
    const sent: string[] = [];
    const producer = {
      connect: async () => undefined,
      disconnect: async () => undefined,
      send: async ({ topic, messages }: { topic: string; messages: { headers: Record<string, string> }[] }) => {
        if (messages[0]!.headers['dlq-replayed-from'] === `${dlq}:0:2`) throw new Error('This server does not host this topic-partition');
        sent.push(`${topic} ${messages[0]!.headers['dlq-replayed-from']}`);
      },
    };
    const kafka = { producer: () => producer } as unknown as Kafka;
    const results = await replayDeadLetters(kafka, dlq, [letterAt(1), letterAt(2), letterAt(3)]);
    expect(results.map((r) => [r.id, r.ok])).toEqual([['0:1', true], ['0:2', false], ['0:3', true]]);
    expect(sent).toEqual([`lf.qa-events ${dlq}:0:1`, `lf.qa-events ${dlq}:0:3`]);
  });
});
