import { describe, expect, it } from 'vitest';
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
    expect(lines.some((l) => l.msg === 'committing offsets failed; they go with the next commit')).toBe(true);

    const retried = offsets.commit(broker.commit);
    await broker.settle('ok');
    await retried;
    expect(broker.requests[1]).toEqual([
      { topic: 'a', partition: 1, offset: '4' },
      { topic: 'a', partition: 0, offset: '2' },
    ]);
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
