import { createRequire } from 'node:module';

/**
 * kafkajs 2.2.4 (the last release) checks every connection's request queue for pending requests on
 * a timer it re-arms after each check, whether or not anything is pending. With nothing throttled
 * the delay is `throttledUntil - Date.now()`, negative, which Node runs as 1 ms: each broker
 * connection wakes its process about a thousand times a second for nothing
 * (tulios/kafkajs#1556, #1704; the fixes, #1667 and #1768, were never released). On the 2-core
 * machine that loop was most of an idle service's CPU (about 45 ms a second in task-svc's profile).
 * Under load it costs little (a busy event loop runs the timer once per turn): `bench:saga` showed
 * the same CPU per saga with and without the fix.
 *
 * The fix is the one proposed upstream: with nothing pending and no throttle in force, do not
 * schedule a check. Nothing is lost by it: a request that cannot be sent at once is queued by
 * `push`, which schedules a check itself (then something is pending), and every fulfilled request
 * runs `checkPendingRequests` directly. While requests wait, the timing is kafkajs's own: the end
 * of the throttle, or its 10 ms interval when the wait is for in-flight slots.
 */

/** kafkajs's own `CHECK_PENDING_REQUESTS_INTERVAL` (not exported). */
const CHECK_PENDING_REQUESTS_INTERVAL_MS = 10;

interface RequestQueueState {
  throttledUntil: number;
  throttleCheckTimeoutId: ReturnType<typeof setTimeout> | null;
  pending: unknown[];
  checkPendingRequests(): void;
}

interface RequestQueueClass {
  prototype: { scheduleCheckPendingRequests(this: RequestQueueState): void };
}

export const KafkajsIdleLoopFix = {
  applied: 'applied',
  /** Another kafkajs than the one the fix was written for: left as it is (the unit spec then fails, to be looked at). */
  versionMismatch: 'version-mismatch',
} as const;
export type KafkajsIdleLoopFix = (typeof KafkajsIdleLoopFix)[keyof typeof KafkajsIdleLoopFix];

/** The kafkajs release whose request queue this fix replaces a method of. */
export const KAFKAJS_FIXED_VERSION = '2.2.4';

const FIXED = Symbol.for('labelflow.kafkajs.idle-loop-fix');

function scheduleCheckPendingRequests(this: RequestQueueState): void {
  if (this.throttleCheckTimeoutId) return;
  const untilUnthrottled = this.throttledUntil - Date.now();
  const waiting = this.pending.length > 0;
  if (!waiting && untilUnthrottled <= 0) return;
  // A throttle that ends within the millisecond still gets a check (kafkajs#1532's race).
  const delay = waiting && untilUnthrottled <= 0 ? CHECK_PENDING_REQUESTS_INTERVAL_MS : untilUnthrottled;
  this.throttleCheckTimeoutId = setTimeout(() => {
    this.throttleCheckTimeoutId = null;
    this.checkPendingRequests();
  }, delay);
}

/**
 * Replaces kafkajs's `RequestQueue.prototype.scheduleCheckPendingRequests` with the fixed one, once
 * per process (every kafkajs client of the process shares the class). `createKafka` calls it; a
 * client built with `new Kafka(…)` directly benefits once any `createKafka` ran, or after calling
 * this. Only kafkajs 2.2.4 is patched: another version is left alone and reported.
 */
export function fixKafkajsIdleLoop(): KafkajsIdleLoopFix {
  const require = createRequire(import.meta.url);
  const { version } = require('kafkajs/package.json') as { version: string };
  if (version !== KAFKAJS_FIXED_VERSION) return KafkajsIdleLoopFix.versionMismatch;
  const RequestQueue = require('kafkajs/src/network/requestQueue/index.js') as RequestQueueClass & { [FIXED]?: true };
  if (RequestQueue[FIXED]) return KafkajsIdleLoopFix.applied;
  RequestQueue.prototype.scheduleCheckPendingRequests = scheduleCheckPendingRequests;
  RequestQueue[FIXED] = true;
  return KafkajsIdleLoopFix.applied;
}
