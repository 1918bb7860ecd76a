import Fastify from 'fastify';
import { describe, expect, it, vi } from 'vitest';
import { HttpError } from './errors';
import { createLongPollQuota, honourPreferWait, parsePreferWait, retryWhileNotYet } from './prefer';
import { MAX_SIGNAL_PAYLOAD_BYTES, signalPayloads, type TaskSignals, type TaskSubscription } from './signals';

describe('service-kit: parsePreferWait (RFC 7240)', () => {
  it('reads wait=N as milliseconds', () => {
    expect(parsePreferWait('wait=10', 30)).toBe(10_000);
    expect(parsePreferWait('wait=0', 30)).toBe(0);
  });

  it('caps the wait at the maximum', () => {
    expect(parsePreferWait('wait=600', 30)).toBe(30_000);
    expect(parsePreferWait('wait=99999999999999999999999', 30)).toBe(30_000);
  });

  it('finds wait among other preferences, parameters, any case, spacing and a quoted value', () => {
    expect(parsePreferWait('respond-async, wait=5', 30)).toBe(5_000);
    expect(parsePreferWait('return=minimal;foo="a,b", Wait = 7 ; x=y', 30)).toBe(7_000);
    expect(parsePreferWait('WAIT="12"', 30)).toBe(12_000);
    expect(parsePreferWait(['handling=lenient', 'wait=3'], 30)).toBe(3_000);
  });

  it('considers only the first wait, as RFC 7240 says of a repeated preference', () => {
    expect(parsePreferWait('wait=4, wait=9', 30)).toBe(4_000);
    expect(parsePreferWait('wait=soon, wait=9', 30)).toBeUndefined();
  });

  it('ignores a header without a usable wait', () => {
    expect(parsePreferWait(undefined, 30)).toBeUndefined();
    expect(parsePreferWait('', 30)).toBeUndefined();
    expect(parsePreferWait('respond-async', 30)).toBeUndefined();
    expect(parsePreferWait('wait', 30)).toBeUndefined();
    expect(parsePreferWait('wait=', 30)).toBeUndefined();
    expect(parsePreferWait('wait=-1', 30)).toBeUndefined();
    expect(parsePreferWait('wait=1.5', 30)).toBeUndefined();
    expect(parsePreferWait('wait=5s', 30)).toBeUndefined();
    expect(parsePreferWait('waiting=5', 30)).toBeUndefined();
    expect(parsePreferWait('foo="wait=5"', 30)).toBeUndefined();
  });
});

describe('service-kit: each caller\'s share of the waiting requests', () => {
  it('gives a caller at most its quota of slots, gives one back once, and keeps callers apart', () => {
    const quota = createLongPollQuota(2);
    const first = quota.tryTake('ann');
    const second = quota.tryTake('ann');
    expect([first, second].every((r) => typeof r === 'function')).toBe(true);
    expect(quota.tryTake('ann')).toBeUndefined();
    expect(quota.tryTake('bob')).toBeTypeOf('function');
    first?.();
    first?.();
    expect(quota.waiting('ann')).toBe(1);
    expect(quota.tryTake('ann')).toBeTypeOf('function');
    expect(() => createLongPollQuota(0)).toThrow(expect.objectContaining({ code: 'CONFIG_INVALID' }));
  });

  it('answers a caller out of slots at once, without Preference-Applied, and honours the wait again once a response is over', async () => {
    const quota = createLongPollQuota(2);
    const app = Fastify();
    const held: (() => void)[] = [];
    app.addHook('onRequest', async (request) => {
      (request as unknown as { principal: { subject: string } }).principal = { subject: String(request.headers['x-caller']) };
    });
    app.get('/wait', async (request, reply) => {
      const waitMs = honourPreferWait(request, reply, quota);
      if (waitMs) await new Promise<void>((resolve) => held.push(resolve));
      return { waitMs: waitMs ?? null };
    });
    const ask = (caller: string) => app.inject({ url: '/wait', headers: { prefer: 'wait=10', 'x-caller': caller } });

    const waiting = [ask('ann'), ask('ann')];
    await vi.waitFor(() => expect(held).toHaveLength(2));
    const third = await ask('ann');
    expect([third.json(), third.headers['preference-applied']]).toEqual([{ waitMs: null }, undefined]);
    const other = ask('bob');
    await vi.waitFor(() => expect(held).toHaveLength(3));

    held.shift()?.();
    expect((await waiting[0])?.headers['preference-applied']).toBe('wait=10');
    expect(quota.waiting('ann')).toBe(1);
    const fourth = ask('ann');
    await vi.waitFor(() => expect(held).toHaveLength(3));
    for (const release of held.splice(0)) release();
    expect((await fourth).json()).toEqual({ waitMs: 10_000 });
    expect((await other).json()).toEqual({ waitMs: 10_000 });
    await waiting[1];
    expect([quota.waiting('ann'), quota.waiting('bob')]).toEqual([0, 0]);
    await app.close();
  });
});

describe('service-kit: signal payloads', () => {
  it('joins distinct ids with commas', () => {
    expect(signalPayloads(['1', '2', '1', '3'])).toEqual(['1,2,3']);
    expect(signalPayloads([])).toEqual([]);
  });

  it('chunks many ids into payloads below the NOTIFY limit, losing none', () => {
    const ids = Array.from({ length: 3_000 }, (_, i) => String(250221024157630464n + BigInt(i)));
    const payloads = signalPayloads(ids);
    expect(payloads.length).toBeGreaterThan(1);
    for (const p of payloads) expect(Buffer.byteLength(p)).toBeLessThanOrEqual(MAX_SIGNAL_PAYLOAD_BYTES);
    expect(payloads.flatMap((p) => p.split(','))).toEqual(ids);
  });

  it('fills a payload up to exactly the limit', () => {
    expect(signalPayloads(['aaaa', 'bbbb', 'cccc'], 9)).toEqual(['aaaa,bbbb', 'cccc']);
  });

  it('refuses an id that cannot travel in a payload', () => {
    expect(() => signalPayloads(['1,2'])).toThrow(/without ','/);
    expect(() => signalPayloads([''])).toThrow();
    expect(() => signalPayloads(['x'.repeat(MAX_SIGNAL_PAYLOAD_BYTES + 1)])).toThrow();
  });
});

/** In-memory signals: `signal(taskId)` wakes the subscriptions taken so far, as a committed NOTIFY would. */
function memorySignals() {
  const subs = new Map<string, Set<{ fired: boolean; wake?: () => void }>>();
  let subscriptions = 0;
  const signals: TaskSignals = {
    start: async () => undefined,
    close: async () => undefined,
    publish: async () => undefined,
    notification: (taskIds) => ({ channel: 'signals_memory', payloads: [...taskIds] }),
    closed: false,
    wait: async () => false,
    subscribe(taskId): TaskSubscription {
      subscriptions++;
      const entry: { fired: boolean; wake?: () => void } = { fired: false };
      subs.set(taskId, (subs.get(taskId) ?? new Set()).add(entry));
      return {
        wait: (ms, abort) =>
          entry.fired
            ? Promise.resolve(true)
            : new Promise((resolve) => {
                const settle = (heard: boolean) => {
                  clearTimeout(timer);
                  resolve(heard);
                };
                const timer = setTimeout(() => settle(false), ms);
                abort?.addEventListener('abort', () => settle(false), { once: true });
                entry.wake = () => settle(true);
              }),
        cancel: () => subs.get(taskId)?.delete(entry),
      };
    },
  };
  return {
    signals,
    signal(taskId: string) {
      for (const entry of subs.get(taskId) ?? []) {
        entry.fired = true;
        entry.wake?.();
      }
    },
    get subscriptions() {
      return subscriptions;
    },
    get open() {
      return [...subs.values()].reduce((n, s) => n + s.size, 0);
    },
  };
}

const notYet = () => new HttpError(409, 'ASSIGNMENT_UNKNOWN', 'not yet');

describe('service-kit: retryWhileNotYet', () => {
  it('answers with the first attempt that is not "not yet", woken by the task\'s signal', async () => {
    const memory = memorySignals();
    let attempts = 0;
    const answer = await retryWhileNotYet({
      signals: memory.signals,
      taskId: 't1',
      waitMs: 60_000,
      recheckMs: 60_000,
      notYet: ['ASSIGNMENT_UNKNOWN'],
      attempt: async () => {
        attempts++;
        if (attempts === 1) {
          // The change commits while the first attempt is still deciding: it must not be missed.
          memory.signal('t1');
          throw notYet();
        }
        return 'accepted';
      },
    });
    expect(answer).toBe('accepted');
    expect(attempts).toBe(2);
    expect(memory.open).toBe(0);
  });

  it('rethrows the last "not yet" once the wait is over, re-checking without signals meanwhile', async () => {
    const memory = memorySignals();
    let attempts = 0;
    const failure = await retryWhileNotYet({
      signals: memory.signals,
      taskId: 't2',
      waitMs: 250,
      recheckMs: 50,
      notYet: ['ASSIGNMENT_UNKNOWN'],
      attempt: async () => {
        attempts++;
        throw notYet();
      },
    }).catch((error: unknown) => error);
    expect(failure).toBeInstanceOf(HttpError);
    expect((failure as HttpError).code).toBe('ASSIGNMENT_UNKNOWN');
    expect(attempts).toBeGreaterThan(2);
    expect(memory.open).toBe(0);
  });

  it('passes any other error on at once', async () => {
    const memory = memorySignals();
    let attempts = 0;
    const failure = await retryWhileNotYet({
      signals: memory.signals,
      taskId: 't3',
      waitMs: 60_000,
      notYet: ['ASSIGNMENT_UNKNOWN'],
      attempt: async () => {
        attempts++;
        throw new HttpError(403, 'NOT_ASSIGNEE', 'someone else');
      },
    }).catch((error: unknown) => error);
    expect((failure as HttpError).code).toBe('NOT_ASSIGNEE');
    expect(attempts).toBe(1);
  });

  it('makes one attempt and subscribes to nothing without a wait', async () => {
    const memory = memorySignals();
    const failure = await retryWhileNotYet({ signals: memory.signals, taskId: 't4', waitMs: undefined, notYet: ['ASSIGNMENT_UNKNOWN'], attempt: async () => Promise.reject(notYet()) }).catch((e: unknown) => e);
    expect((failure as HttpError).code).toBe('ASSIGNMENT_UNKNOWN');
    expect(memory.subscriptions).toBe(0);
  });

  it('makes no further attempt once the client hung up during the wait', async () => {
    const memory = memorySignals();
    const gone = new AbortController();
    let attempts = 0;
    const answer = retryWhileNotYet({
      signals: memory.signals,
      taskId: 't6',
      waitMs: 60_000,
      recheckMs: 60_000,
      abort: gone.signal,
      notYet: ['ASSIGNMENT_UNKNOWN'],
      attempt: async () => {
        attempts++;
        if (attempts === 1) setImmediate(() => gone.abort());
        throw notYet();
      },
    }).catch((e: unknown) => e);
    expect(((await answer) as HttpError).code).toBe('ASSIGNMENT_UNKNOWN');
    expect(attempts).toBe(1);
  });

  it('stops waiting when the client has gone', async () => {
    const memory = memorySignals();
    const gone = new AbortController();
    let attempts = 0;
    const failure = await retryWhileNotYet({
      signals: memory.signals,
      taskId: 't5',
      waitMs: 60_000,
      recheckMs: 60_000,
      abort: gone.signal,
      notYet: ['ASSIGNMENT_UNKNOWN'],
      attempt: async () => {
        attempts++;
        gone.abort();
        throw notYet();
      },
    }).catch((e: unknown) => e);
    expect((failure as HttpError).code).toBe('ASSIGNMENT_UNKNOWN');
    expect(attempts).toBe(1);
  });
});
