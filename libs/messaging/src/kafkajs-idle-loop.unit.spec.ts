import { createRequire } from 'node:module';
import { afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import { fixKafkajsIdleLoop, KafkajsIdleLoopFix } from './kafkajs-idle-loop';

// kafkajs's own request queue, the class every broker connection of the process uses.
interface Queue {
  throttleCheckTimeoutId: unknown;
  pending: unknown[];
  inflight: Map<number, unknown>;
  push(request: { entry: Entry; expectResponse: boolean; sendRequest: () => void }): void;
  fulfillRequest(response: { correlationId: number; payload: Buffer; size: number }): void;
  maybeThrottle(ms: number): void;
  scheduleCheckPendingRequests(): void;
  destroy(): void;
}
interface Entry {
  correlationId: number;
  apiKey: number;
  apiName: string;
  apiVersion: number;
  resolve: (answer: unknown) => void;
  reject: (error: unknown) => void;
}
const RequestQueue = createRequire(import.meta.url)('kafkajs/src/network/requestQueue/index.js') as new (options: object) => Queue;
const silent = { debug: () => undefined, info: () => undefined, warn: () => undefined, error: () => undefined };

const queue = (maxInFlightRequests: number | null = null): Queue =>
  new RequestQueue({ maxInFlightRequests, requestTimeout: 30_000, enforceRequestTimeout: false, clientId: 'spec', broker: '127.0.0.1:9092', logger: silent });

/** A request whose sends are counted; its answer is resolved through `fulfillRequest`. */
const request = (correlationId: number) => {
  const sent: number[] = [];
  const entry: Entry = { correlationId, apiKey: 1, apiName: 'Fetch', apiVersion: 11, resolve: () => undefined, reject: () => undefined };
  return { sent, pushed: { entry, expectResponse: true, sendRequest: () => sent.push(Date.now()) } };
};

describe('the kafkajs request-queue idle loop fix', () => {
  beforeAll(() => {
    expect(fixKafkajsIdleLoop()).toBe(KafkajsIdleLoopFix.applied);
  });
  afterEach(() => {
    vi.useRealTimers();
  });

  it('applies to the installed kafkajs, and applying it twice changes nothing', () => {
    const patched = Object.getOwnPropertyDescriptor((RequestQueue as unknown as { prototype: object }).prototype, 'scheduleCheckPendingRequests')?.value as unknown;
    expect(fixKafkajsIdleLoop()).toBe(KafkajsIdleLoopFix.applied);
    expect(Object.getOwnPropertyDescriptor((RequestQueue as unknown as { prototype: object }).prototype, 'scheduleCheckPendingRequests')?.value).toBe(patched);
  });

  it('arms no timer once a request is answered and nothing waits (stock kafkajs re-arms a 1 ms one forever)', () => {
    const q = queue();
    const { sent, pushed } = request(1);
    q.push(pushed);
    expect(sent).toHaveLength(1);
    q.fulfillRequest({ correlationId: 1, payload: Buffer.alloc(0), size: 0 });
    expect(q.throttleCheckTimeoutId).toBeNull();
    q.scheduleCheckPendingRequests();
    expect(q.throttleCheckTimeoutId).toBeNull();
    q.destroy();
  });

  it('sends a request held back by the in-flight limit as soon as the one before it is answered, then goes quiet', () => {
    vi.useFakeTimers({ now: 1_000_000 });
    const q = queue(1);
    const first = request(1);
    const second = request(2);
    q.push(first.pushed);
    q.push(second.pushed);
    expect([first.sent.length, second.sent.length]).toEqual([1, 0]);
    q.fulfillRequest({ correlationId: 1, payload: Buffer.alloc(0), size: 0 });
    expect(second.sent).toEqual([1_000_000]);
    expect(q.pending).toHaveLength(0);
    q.fulfillRequest({ correlationId: 2, payload: Buffer.alloc(0), size: 0 });
    // The check armed while the second request waited runs once, finds nothing, and arms no other.
    vi.advanceTimersByTime(10);
    expect(q.throttleCheckTimeoutId).toBeNull();
    expect(vi.getTimerCount()).toBe(0);
    q.destroy();
  });

  it('sends a request queued while the broker throttles the client when the throttle ends, not before', () => {
    vi.useFakeTimers({ now: 1_000_000 });
    const q = queue();
    q.maybeThrottle(40);
    const { sent, pushed } = request(1);
    q.push(pushed);
    expect(sent).toHaveLength(0);
    vi.advanceTimersByTime(39);
    expect(sent).toHaveLength(0);
    vi.advanceTimersByTime(1);
    expect(sent).toEqual([1_000_040]);
    q.fulfillRequest({ correlationId: 1, payload: Buffer.alloc(0), size: 0 });
    expect(q.throttleCheckTimeoutId).toBeNull();
    expect(vi.getTimerCount()).toBe(0);
    q.destroy();
  });

  it('still checks after 10 ms when a request waits and its throttle has just ended (kafkajs#1532)', () => {
    vi.useFakeTimers({ now: 2_000_000 });
    const q = queue();
    q.maybeThrottle(1);
    const { sent, pushed } = request(1);
    q.push(pushed);
    // The check armed by push is dropped, and the throttle's end reached, before the next check is scheduled.
    q.destroy();
    vi.advanceTimersByTime(1);
    q.scheduleCheckPendingRequests();
    vi.advanceTimersByTime(9);
    expect(sent).toHaveLength(0);
    vi.advanceTimersByTime(1);
    expect(sent).toEqual([2_000_011]);
    q.destroy();
  });
});
