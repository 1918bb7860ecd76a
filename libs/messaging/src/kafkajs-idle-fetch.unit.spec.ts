import { describe, expect, it } from 'vitest';
import { nextFetchSettings } from './kafkajs-idle-fetch';

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
