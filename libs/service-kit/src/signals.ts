import type pg from 'pg';
import { notify, type Notification } from '@labelflow/outbox';
import type { Logger } from '@labelflow/telemetry';
import type { Queryable } from './db';
import { ServiceKitError, ServiceKitErrors } from './errors';

/** PostgreSQL refuses a NOTIFY payload of 8000 bytes or more. */
export const MAX_SIGNAL_PAYLOAD_BYTES = 7_999;
const SEPARATOR = ',';

export interface TaskSignalsOptions {
  readonly pool: pg.Pool;
  /** LISTEN/NOTIFY channel, one per service: every instance of the service hears every change. */
  readonly channel: string;
  readonly logger: Logger;
  /** Backoff between attempts to listen again after the session was lost. Default 100 ms doubling to 5 s. */
  readonly reconnect?: { readonly initialMs: number; readonly maxMs: number };
}

/** Interest in one task, taken before looking at its state so a change in between is not missed. */
export interface TaskSubscription {
  /**
   * Resolves true once the task was signalled since `subscribe` (at once if it already was), or
   * when the listener came back after losing its session (what changed meanwhile is unknown, so
   * look again). Resolves false after `timeoutMs`, on `abort` and once the signals are closed.
   */
  wait(timeoutMs: number, abort?: AbortSignal): Promise<boolean>;
  /** Drops the interest; call it when done, whatever `wait` answered. */
  cancel(): void;
}

/**
 * Task-change signals among the instances of one service: a writer publishes the ids of the tasks
 * it changed inside its transaction, and requests waiting on one of them (in any instance) wake
 * when it commits. A signal says "look again", never what changed: waiters read the state anew.
 */
export interface TaskSignals {
  /** Starts listening; resolves after the first attempt (a failed one is retried in the background). */
  start(): Promise<void>;
  /** Stops listening and ends every wait with false. */
  close(): Promise<void>;
  /** Signals the tasks when `tx` commits (NOTIFY is transactional): nothing if it rolls back. */
  publish(tx: Queryable, taskIds: readonly string[]): Promise<void>;
  /** The same signal as a notification to send with the outbox insert (`emit`'s `also`): one statement fewer. */
  notification(taskIds: readonly string[]): Notification;
  subscribe(taskId: string): TaskSubscription;
  /** `subscribe` and `wait` in one, for a caller with nothing to check in between. */
  wait(taskId: string, timeoutMs: number): Promise<boolean>;
  /** True once `close` was called: a loop waiting on signals should stop. */
  readonly closed: boolean;
}

interface Waiter {
  /** Set once: true when signalled, false when the signals closed. */
  outcome?: boolean;
  /** Ends the `wait` in progress, if any. */
  settle?: (heard: boolean) => void;
}

const CHANNEL = /^[A-Za-z_][A-Za-z0-9_]{0,62}$/;

/**
 * Splits the distinct ids into comma-joined payloads, each under PostgreSQL's NOTIFY limit.
 * Exported for the tests of the limit.
 */
export function signalPayloads(taskIds: readonly string[], maxBytes = MAX_SIGNAL_PAYLOAD_BYTES): string[] {
  const payloads: string[] = [];
  let current = '';
  let bytes = 0;
  for (const id of new Set(taskIds)) {
    const size = Buffer.byteLength(id);
    if (size === 0 || size > maxBytes || id.includes(SEPARATOR)) {
      throw new ServiceKitError(ServiceKitErrors.CONFIG_INVALID, `a task id to signal must be 1-${maxBytes} bytes without '${SEPARATOR}', got ${JSON.stringify(id.slice(0, 100))}`);
    }
    if (bytes > 0 && bytes + 1 + size > maxBytes) {
      payloads.push(current);
      current = '';
      bytes = 0;
    }
    current = bytes === 0 ? id : `${current}${SEPARATOR}${id}`;
    bytes += (bytes === 0 ? 0 : 1) + size;
  }
  if (bytes > 0) payloads.push(current);
  return payloads;
}

export function createTaskSignals({ pool, channel, logger, reconnect = { initialMs: 100, maxMs: 5_000 } }: TaskSignalsOptions): TaskSignals {
  if (!CHANNEL.test(channel)) throw new ServiceKitError(ServiceKitErrors.CONFIG_INVALID, `signal channel must be a PostgreSQL identifier (letters, digits, _), got ${JSON.stringify(channel)}`);
  const waiting = new Map<string, Set<Waiter>>();
  let state: 'new' | 'running' | 'closed' = 'new';
  let listener: pg.PoolClient | undefined;
  let connecting: Promise<void> | undefined;
  let retry: NodeJS.Timeout | undefined;
  let backoff = reconnect.initialMs;
  let sessions = 0;

  const fire = (waiter: Waiter, heard: boolean) => {
    if (waiter.outcome !== undefined) return;
    waiter.outcome = heard;
    waiter.settle?.(heard);
  };

  function wake(taskId: string): void {
    const waiters = waiting.get(taskId);
    if (!waiters) return;
    waiting.delete(taskId);
    for (const waiter of waiters) fire(waiter, true);
  }

  function wakeAll(heard: boolean): void {
    const all = [...waiting.values()];
    waiting.clear();
    for (const waiters of all) for (const waiter of waiters) fire(waiter, heard);
  }

  async function listen(): Promise<void> {
    const client = await pool.connect();
    if (state !== 'running') return client.release(true);
    client.on('notification', (message) => {
      if (message.channel !== channel || !message.payload) return;
      for (const taskId of message.payload.split(SEPARATOR)) wake(taskId);
    });
    // pg emits 'error' on a checked-out client whose connection breaks; unheard, it would crash the
    // process. The pool counts a dead client as checked out until released, so release it here.
    const lost = (error?: Error) => {
      if (listener !== client) return;
      listener = undefined;
      client.release(true);
      logger.warn({ err: error, channel }, 'task signals: LISTEN session lost; listening again');
      listenIn(backoff);
    };
    client.on('error', lost);
    client.on('end', () => lost());
    try {
      await client.query(`LISTEN "${channel}"`);
    } catch (error) {
      client.release(true);
      throw error;
    }
    if (state !== 'running') return client.release(true);
    listener = client;
    backoff = reconnect.initialMs;
    sessions += 1;
    // Changes that committed while no session listened were never heard: every waiter looks again.
    if (sessions > 1) wakeAll(true);
    logger.info({ channel, session: sessions }, 'task signals listening');
  }

  async function connect(): Promise<void> {
    try {
      await listen();
    } catch (error) {
      const delay = backoff;
      backoff = Math.min(backoff * 2, reconnect.maxMs);
      logger.warn({ err: error, channel, backoffMs: delay }, 'task signals: cannot LISTEN; retrying');
      listenIn(delay);
    }
  }

  function listenIn(ms: number): void {
    if (state !== 'running' || retry) return;
    retry = setTimeout(() => {
      retry = undefined;
      connecting = connect();
    }, ms);
    retry.unref();
  }

  function subscribe(taskId: string): TaskSubscription {
    const waiter: Waiter = {};
    if (state === 'closed') waiter.outcome = false;
    else {
      const waiters = waiting.get(taskId) ?? new Set<Waiter>();
      waiters.add(waiter);
      waiting.set(taskId, waiters);
    }
    return {
      wait(timeoutMs, abort) {
        if (waiter.outcome !== undefined) return Promise.resolve(waiter.outcome);
        if (abort?.aborted) return Promise.resolve(false);
        return new Promise<boolean>((resolve) => {
          // A wait never depends on the listener: it ends by its timeout even while reconnecting.
          const timer = setTimeout(() => settle(false), Math.max(0, timeoutMs));
          const onAbort = () => settle(false);
          function settle(heard: boolean) {
            clearTimeout(timer);
            abort?.removeEventListener('abort', onAbort);
            waiter.settle = undefined;
            resolve(heard);
          }
          abort?.addEventListener('abort', onAbort, { once: true });
          waiter.settle = settle;
        });
      },
      cancel() {
        waiter.settle?.(false);
        const waiters = waiting.get(taskId);
        if (!waiters?.delete(waiter)) return;
        if (waiters.size === 0) waiting.delete(taskId);
      },
    };
  }

  return {
    async start() {
      if (state !== 'new') return;
      state = 'running';
      connecting = connect();
      await connecting;
    },
    async close() {
      if (state === 'closed') return;
      state = 'closed';
      clearTimeout(retry);
      retry = undefined;
      wakeAll(false);
      await connecting;
      const client = listener;
      listener = undefined;
      client?.release(true);
    },
    publish: (tx, taskIds) => notify(tx, { channel, payloads: signalPayloads(taskIds) }),
    notification: (taskIds) => ({ channel, payloads: signalPayloads(taskIds) }),
    subscribe,
    async wait(taskId, timeoutMs) {
      const subscription = subscribe(taskId);
      try {
        return await subscription.wait(timeoutMs);
      } finally {
        subscription.cancel();
      }
    },
    get closed() {
      return state === 'closed';
    },
  };
}
