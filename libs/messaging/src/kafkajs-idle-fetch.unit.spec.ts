import { describe, expect, it } from 'vitest';
import { nextFetchSettings, useIdleLongPoll } from './kafkajs-idle-fetch';

describe('the idle long poll settings (nextFetchSettings)', () => {
  const configured = { minBytes: 65_536, maxWaitTime: 50 };
  const policy = { waitMs: 250, afterEmpty: 10 };

  it('asks for any message and waits longer once enough fetches in a row brought none', () => {
    expect(nextFetchSettings(configured, 10, policy)).toEqual({ minBytes: 1, maxWaitTime: 250 });
    expect(nextFetchSettings(configured, 11, policy)).toEqual({ minBytes: 1, maxWaitTime: 250 });
  });

  it('keeps the consumer settings while messages came within the last few fetches, so a trickle is still batched', () => {
    expect(nextFetchSettings(configured, 0, policy)).toBe(configured);
    expect(nextFetchSettings(configured, 9, policy)).toBe(configured);
  });

  it('never waits less than the consumer own wait', () => {
    expect(nextFetchSettings({ minBytes: 65_536, maxWaitTime: 500 }, 10, policy)).toEqual({ minBytes: 1, maxWaitTime: 500 });
  });
});

describe('the idle long poll of a group (useIdleLongPoll)', () => {
  it('shares one policy between the consumers of a group, and refuses another policy for it instead of ignoring it', () => {
    const group = `idle-${Math.random()}`;
    const first = useIdleLongPoll(group, { waitMs: 250, afterEmpty: 40 });
    const same = useIdleLongPoll(group, { waitMs: 250, afterEmpty: 40 });
    expect(() => useIdleLongPoll(group, { waitMs: 500, afterEmpty: 40 })).toThrow(expect.objectContaining({ code: 'MESSAGING_CONFIG_INVALID', message: expect.stringContaining('would be ignored') }));
    first.release();
    same.release();
    // Once every holder let go, the group may take another policy.
    useIdleLongPoll(group, { waitMs: 500, afterEmpty: 40 }).release();
  });
});
