import type { FastifyReply, FastifyRequest } from 'fastify';
import type { Metrics } from '@labelflow/telemetry';
import { HttpError, ServiceKitError, ServiceKitErrors } from './errors';
import type { TaskSignals } from './signals';

export const PREFER_HEADER = 'prefer';
export const PREFERENCE_APPLIED_HEADER = 'preference-applied';
/** The longest `Prefer: wait` honoured: a longer one is cut to this (and says so in Preference-Applied). */
export const MAX_PREFER_WAIT_S = 30;
/** How often a waiting request looks again without a signal, in case a notification was lost. */
export const RECHECK_MS = 5_000;

/** Splits at `separator` outside quoted strings (RFC 9110 quoted-string, with backslash escapes). */
function splitOutsideQuotes(text: string, separator: string): string[] {
  const parts: string[] = [];
  let current = '';
  let quoted = false;
  for (let i = 0; i < text.length; i++) {
    const c = text.charAt(i);
    if (quoted && c === '\\' && i + 1 < text.length) {
      current += c + text.charAt(++i);
      continue;
    }
    if (c === '"') quoted = !quoted;
    if (c === separator && !quoted) {
      parts.push(current);
      current = '';
    } else current += c;
  }
  parts.push(current);
  return parts;
}

const unquote = (value: string) => (value.length >= 2 && value.startsWith('"') && value.endsWith('"') ? value.slice(1, -1).replace(/\\(.)/g, '$1') : value);

/**
 * The `wait` preference of an RFC 7240 `Prefer` header, in milliseconds, capped at `maxSeconds`;
 * undefined when the header names none or its value is not delta-seconds. Other preferences
 * (`respond-async, wait=5`), parameters (`wait=5; x=y`), any case and a quoted value are fine; of
 * several `wait`s only the first counts, as RFC 7240 says.
 */
export function parsePreferWait(header: string | readonly string[] | undefined, maxSeconds: number): number | undefined {
  if (header === undefined) return undefined;
  const text = typeof header === 'string' ? header : header.join(',');
  for (const preference of splitOutsideQuotes(text, ',')) {
    const [head = ''] = splitOutsideQuotes(preference, ';');
    const eq = head.indexOf('=');
    const name = (eq === -1 ? head : head.slice(0, eq)).trim().toLowerCase();
    if (name !== 'wait') continue;
    const value = eq === -1 ? '' : unquote(head.slice(eq + 1).trim());
    if (!/^[0-9]+$/.test(value)) return undefined;
    return Math.min(Number(value), maxSeconds) * 1000;
  }
  return undefined;
}

/** The default of LONG_POLLS_PER_CALLER: waiting requests one caller may have in one instance. */
export const DEFAULT_LONG_POLLS_PER_CALLER = 256;

/**
 * How many requests each caller may have waiting (Prefer: wait) in this instance. Within the rate
 * limit one caller could otherwise keep thousands waiting, each looking at the database again on
 * every signal and every recheck (LONG_POLL_RECHECK_MS). Beyond the quota the preference is simply not honoured
 * (RFC 7240 lets a server ignore it): the request gets today's answer at once.
 */
export interface LongPollQuota {
  /** How often a request holding a slot looks again without a signal (`awaitTask`'s `recheckMs`). */
  readonly recheckMs: number;
  /** A slot for `caller`, with its release (idempotent); undefined when the caller has none left. */
  tryTake(caller: string): (() => void) | undefined;
  /** Requests `caller` has waiting now. */
  waiting(caller: string): number;
}

export function createLongPollQuota(perCaller: number = DEFAULT_LONG_POLLS_PER_CALLER, recheckMs: number = RECHECK_MS): LongPollQuota {
  if (!Number.isInteger(perCaller) || perCaller < 1) throw new ServiceKitError(ServiceKitErrors.CONFIG_INVALID, `perCaller must be a positive integer, got ${perCaller}`);
  const held = new Map<string, number>();
  return {
    recheckMs,
    tryTake(caller) {
      const now = held.get(caller) ?? 0;
      if (now >= perCaller) return undefined;
      held.set(caller, now + 1);
      let released = false;
      return () => {
        if (released) return;
        released = true;
        const left = (held.get(caller) ?? 1) - 1;
        if (left <= 0) held.delete(caller);
        else held.set(caller, left);
      };
    },
    waiting: (caller) => held.get(caller) ?? 0,
  };
}

/**
 * The wait the request asked for with `Prefer: wait=N`, capped, in ms; sets `Preference-Applied`
 * on the reply, which every answer of the route then carries, so only call it where the route does
 * wait. With a `quota`, the wait holds one of the caller's slots until the response is over, and
 * a caller with none left gets no wait (undefined, no Preference-Applied).
 */
export function honourPreferWait(request: FastifyRequest, reply: FastifyReply, quota?: LongPollQuota, maxSeconds = MAX_PREFER_WAIT_S): number | undefined {
  const waitMs = parsePreferWait(request.headers[PREFER_HEADER], maxSeconds);
  if (waitMs === undefined) return undefined;
  if (quota && waitMs > 0) {
    const release = quota.tryTake(request.principal.subject);
    if (!release) {
      request.log.debug({ caller: request.principal.subject }, 'Prefer: wait not honoured: the caller has every long-poll slot of this instance');
      return undefined;
    }
    reply.raw.once('close', release);
    reply.raw.once('finish', release);
  }
  reply.header(PREFERENCE_APPLIED_HEADER, `wait=${waitMs / 1000}`);
  return waitMs;
}

/** Aborts when the client hangs up before its answer was sent: nobody is left to wait for. */
export function clientGone(reply: FastifyReply): AbortSignal {
  const controller = new AbortController();
  reply.raw.once('close', () => {
    if (!reply.raw.writableFinished) controller.abort();
  });
  return controller.signal;
}

export interface AwaitTaskOptions<T> {
  readonly signals: TaskSignals;
  readonly taskId: string;
  /** How long to keep looking; undefined or 0: look once. */
  readonly waitMs: number | undefined;
  /** One look: a complete unit of work that holds no connection once it returns. */
  readonly attempt: () => Promise<T>;
  /** Whether an attempt's result is the answer; the last result is returned when time runs out. */
  readonly settled: (result: T) => boolean;
  readonly abort?: AbortSignal;
  readonly recheckMs?: number;
  /** `http_long_polls_waiting{route}`, `http_long_polls_total{route,outcome}`, `http_long_poll_wakeups_total{route,cause}`. */
  readonly metrics?: Metrics;
  readonly route?: string;
}

export const LongPollOutcome = { settled: 'settled', timedOut: 'timed_out', abandoned: 'abandoned' } as const;
export type LongPollOutcome = (typeof LongPollOutcome)[keyof typeof LongPollOutcome];

/**
 * Runs `attempt` until its result is `settled`, waking on a signal for the task or every
 * `recheckMs`, for at most `waitMs`. Nothing is held between attempts. The subscription is taken
 * before each attempt, so a change that commits between the attempt and the wait still wakes it.
 */
export async function awaitTask<T>(options: AwaitTaskOptions<T>): Promise<T> {
  const { signals, taskId, waitMs, attempt, settled, abort, recheckMs = RECHECK_MS, metrics, route = 'unknown' } = options;
  if (!waitMs || waitMs <= 0) return attempt();
  const waitingNow = metrics?.gauge('http_long_polls_waiting', 'Requests waiting for a task to change (Prefer: wait)', ['route']);
  const ended = metrics?.counter('http_long_polls_total', 'Requests that waited (Prefer: wait), by how the wait ended', ['route', 'outcome']);
  // Many `timer` wakeups that then settle mean notifications go missing: the fallback does the work.
  const wakeups = metrics?.counter('http_long_poll_wakeups_total', 'Waiting requests woken to look again, by a signal or by the re-check timer', ['route', 'cause']);
  const deadline = Date.now() + waitMs;
  const end = (result: T, outcome: LongPollOutcome) => {
    ended?.inc({ route, outcome });
    return result;
  };
  for (;;) {
    const subscription = signals.subscribe(taskId);
    try {
      const result = await attempt();
      if (settled(result)) return end(result, LongPollOutcome.settled);
      const left = deadline - Date.now();
      if (left <= 0) return end(result, LongPollOutcome.timedOut);
      if (signals.closed || abort?.aborted) return end(result, LongPollOutcome.abandoned);
      waitingNow?.inc({ route });
      try {
        const heard = await subscription.wait(Math.min(recheckMs, left), abort);
        // Nobody is left to answer: another attempt could only apply a command no one hears of.
        if (abort?.aborted) return end(result, LongPollOutcome.abandoned);
        wakeups?.inc({ route, cause: heard ? 'signal' : 'timer' });
      } finally {
        waitingNow?.dec({ route });
      }
    } finally {
      subscription.cancel();
    }
  }
}

/**
 * For a command whose "not yet" answer is a thrown HttpError with one of `notYet` codes: runs
 * `attempt` (one complete `request.idempotent` call, which sends the reply only when it returns)
 * again until it answers anything else or the wait is over, then rethrows the last "not yet".
 * A thrown rejection stored nothing and freed the Idempotency-Key, so the next attempt is a fresh
 * run of the same request, and the reply is sent exactly once.
 */
export async function retryWhileNotYet<T>(options: Omit<AwaitTaskOptions<T>, 'settled' | 'attempt'> & { readonly notYet: readonly string[]; readonly attempt: () => Promise<T> }): Promise<T> {
  const { notYet, attempt, ...rest } = options;
  const outcome = await awaitTask<{ readonly value: T } | { readonly notYet: HttpError }>({
    ...rest,
    attempt: () =>
      attempt().then(
        (value) => ({ value }),
        (error: unknown) => {
          if (error instanceof HttpError && notYet.includes(error.code)) return { notYet: error };
          throw error;
        },
      ),
    settled: (o) => 'value' in o,
  });
  if ('notYet' in outcome) throw outcome.notYet;
  return outcome.value;
}
