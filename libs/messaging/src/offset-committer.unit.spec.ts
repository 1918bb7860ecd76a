import { afterEach, describe, expect, it, vi } from 'vitest';
import { captureLogs } from '@labelflow/testing';
import { createOffsetCommitter, type NextOffset } from './offset-committer';

/** A broker that takes each commit once `release` is called, or refuses it when told to. */
const fakeBroker = () => {
  const requests: NextOffset[][] = [];
  const waiting: { ok: () => void; fail: (e: Error) => void }[] = [];
  const commit = (offsets: readonly NextOffset[]) =>
    new Promise<void>((ok, fail) => {
      requests.push([...offsets]);
      waiting.push({ ok, fail });
    });
  const settle = async (how: 'ok' | 'fail') => {
    const next = waiting.shift();
    if (how === 'ok') next?.ok();
    else next?.fail(new Error('REBALANCE_IN_PROGRESS'));
    await new Promise((r) => setImmediate(r));
  };
  return { requests, commit, settle };
};

describe('the offset committer', () => {
  const { logger, lines } = captureLogs({ service: 'offsets-test' });

  it('commits every partition resolved since the last commit in one request, each as the next offset to read', async () => {
    const broker = fakeBroker();
    const offsets = createOffsetCommitter({ log: logger });
    offsets.resolved('a', 0, '4');
    offsets.resolved('a', 0, '6');
    offsets.resolved('b', 2, '9');

    const done = offsets.commit(broker.commit);
    await broker.settle('ok');
    await done;

    expect(broker.requests).toEqual([
      [
        { topic: 'a', partition: 0, offset: '7' },
        { topic: 'b', partition: 2, offset: '10' },
      ],
    ]);
    await offsets.commit(broker.commit);
    expect(broker.requests).toHaveLength(1);
  });

  it('makes the callers that come while a commit is in flight share one more request, with what they resolved', async () => {
    const broker = fakeBroker();
    const offsets = createOffsetCommitter({ log: logger });
    offsets.resolved('a', 0, '1');
    const first = offsets.commit(broker.commit);
    offsets.resolved('a', 1, '5');
    const second = offsets.commit(broker.commit);
    offsets.resolved('a', 2, '8');
    const third = offsets.commit(broker.commit);

    await broker.settle('ok');
    await first;
    await broker.settle('ok');
    await Promise.all([second, third]);

    expect(broker.requests).toEqual([
      [{ topic: 'a', partition: 0, offset: '2' }],
      [
        { topic: 'a', partition: 1, offset: '6' },
        { topic: 'a', partition: 2, offset: '9' },
      ],
    ]);
  });

  it('keeps the offsets of a refused commit for the next one unless newer ones came, logs it and does not throw', async () => {
    const broker = fakeBroker();
    const offsets = createOffsetCommitter({ log: logger });
    offsets.resolved('a', 0, '1');
    offsets.resolved('a', 1, '1');
    const refused = offsets.commit(broker.commit);
    offsets.resolved('a', 1, '3');
    await broker.settle('fail');
    await expect(refused).resolves.toBeUndefined();
    expect(lines.some((l) => l.msg === 'committing offsets failed; trying again')).toBe(true);

    const retried = offsets.commit(broker.commit);
    await broker.settle('ok');
    await retried;
    expect(broker.requests[1]).toEqual([
      { topic: 'a', partition: 1, offset: '4' },
      { topic: 'a', partition: 0, offset: '2' },
    ]);
    offsets.close();
  });

  it('forgets what was not committed at a reset, even when a commit in flight fails after it', async () => {
    const broker = fakeBroker();
    const offsets = createOffsetCommitter({ log: logger });
    offsets.resolved('a', 0, '1');
    const inFlight = offsets.commit(broker.commit);
    offsets.resolved('a', 1, '1');
    offsets.reset();
    await broker.settle('fail');
    await inFlight;

    await offsets.commit(broker.commit);
    expect(broker.requests).toHaveLength(1);
  });
});

describe('a refused commit, when no batch comes after it', () => {
  const { logger } = captureLogs({ service: 'offsets-test', level: 'error' });
  afterEach(() => {
    vi.useRealTimers();
  });

  it('is tried again on its own, backing off, until the broker takes it', async () => {
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout'] });
    const broker = fakeBroker();
    const offsets = createOffsetCommitter({ log: logger, retry: { initialMs: 100, maxMs: 300 } });
    offsets.resolved('a', 0, '9');
    void offsets.commit(broker.commit);
    await broker.settle('fail');

    await vi.advanceTimersByTimeAsync(99);
    expect(broker.requests).toHaveLength(1);
    await vi.advanceTimersByTimeAsync(1);
    expect(broker.requests).toHaveLength(2);
    await broker.settle('fail');
    await vi.advanceTimersByTimeAsync(199);
    expect(broker.requests).toHaveLength(2);
    await vi.advanceTimersByTimeAsync(1);
    expect(broker.requests).toHaveLength(3);
    await broker.settle('fail');
    await vi.advanceTimersByTimeAsync(300);
    expect(broker.requests).toHaveLength(4);
    await broker.settle('ok');

    expect(broker.requests.map((r) => r[0]?.offset)).toEqual(['10', '10', '10', '10']);
    await vi.advanceTimersByTimeAsync(10_000);
    expect(broker.requests).toHaveLength(4);
  });

  it('starts its back-off again from the first delay once a commit went through', async () => {
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout'] });
    const broker = fakeBroker();
    const offsets = createOffsetCommitter({ log: logger, retry: { initialMs: 100, maxMs: 1_000 } });
    offsets.resolved('a', 0, '1');
    void offsets.commit(broker.commit);
    await broker.settle('fail');
    await vi.advanceTimersByTimeAsync(100);
    await broker.settle('ok');

    offsets.resolved('a', 0, '2');
    void offsets.commit(broker.commit);
    await broker.settle('fail');
    await vi.advanceTimersByTimeAsync(100);
    expect(broker.requests).toHaveLength(4);
    await broker.settle('ok');
  });

  it('is not tried again after a reset or a close', async () => {
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout'] });
    for (const end of ['reset', 'close'] as const) {
      const broker = fakeBroker();
      const offsets = createOffsetCommitter({ log: logger, retry: { initialMs: 100, maxMs: 100 } });
      offsets.resolved('a', 0, '1');
      void offsets.commit(broker.commit);
      await broker.settle('fail');
      offsets[end]();
      await vi.advanceTimersByTimeAsync(1_000);
      expect(broker.requests, end).toHaveLength(1);
    }
  });

  it('is not tried again through a sender whose consumer has stopped, and goes with the next usable sender', async () => {
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout'] });
    const broker = fakeBroker();
    let running = true;
    const stoppable = Object.assign((o: readonly NextOffset[]) => broker.commit(o), { usable: () => running });
    const offsets = createOffsetCommitter({ log: logger, retry: { initialMs: 100, maxMs: 100 } });
    offsets.resolved('a', 0, '1');
    void offsets.commit(stoppable);
    await broker.settle('fail');
    running = false;

    await vi.advanceTimersByTimeAsync(1_000);
    expect(broker.requests).toHaveLength(1);

    const next = offsets.commit(broker.commit);
    await broker.settle('ok');
    await next;
    expect(broker.requests).toEqual([[{ topic: 'a', partition: 0, offset: '2' }], [{ topic: 'a', partition: 0, offset: '2' }]]);
  });
});
