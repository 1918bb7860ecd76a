import type { EachBatchPayload, Producer } from 'kafkajs';
import type { Logger } from '@labelflow/telemetry';
import { coordinates, type RawMessage } from './codec';
import type { ConsumerMetrics } from './consumer-metrics';
import { backoffMs, waitOrAbort, type RetryPolicy, type Step } from './consumer-retry';

export interface DeadLetterDeps {
  /** A producer of its own (not idempotent: see the loop), connected and disconnected by the loop. */
  readonly producer: Producer;
  readonly topic: string;
  readonly groupId: string;
  readonly retry: RetryPolicy;
  readonly metrics: ConsumerMetrics;
  readonly log: Logger;
}

export type DeadLetter = (raw: RawMessage, code: string, reason: string, payload: EachBatchPayload) => Promise<Step>;

/**
 * How much of the original a dead letter carries. `whole`: key, value and headers. `no-value`: the
 * dead-letter topic refused it as too large (it arrived compressed, or the topic's limit is lower),
 * or it is bigger than a broker takes by default: the value stays where it was, at the source
 * coordinates. `minimal`: even the headers were too large: only the `dlq-*` headers, the event
 * type and version, and the key cut to 1 KiB. Either way `npm run dlq -- replay` reads the
 * original from its source.
 */
const Forms = ['whole', 'no-value', 'minimal'] as const;
type Form = (typeof Forms)[number];

/**
 * Records above this are not even tried whole: a request over the brokers' `socket.request.max.bytes`
 * (100 MB by default; a value that arrived compressed, many times smaller) is answered by the broker
 * closing the connection, which reads as a network error and would be retried forever. Below it,
 * a topic that takes less answers MESSAGE_TOO_LARGE, and the letter goes on without its value.
 */
export const DEAD_LETTER_MAX_BYTES = 50_000_000;
/** The error message a minimal letter keeps: it must stay small on a topic with a low limit. */
const MINIMAL_REASON_CHARS = 200;
const MAX_KEY_BYTES = 1_024;
// `dlq-replayed-from`: a replay that failed again names the letter it replays, which the dlq tool
// then leaves out of the next replay; small, and lost without it.
const KEPT_HEADERS: ReadonlySet<string> = new Set(['event-type', 'event-version', 'dlq-replayed-from']);

const byteLength = (v: Buffer | string | null | undefined): number => (v == null ? 0 : typeof v === 'string' ? Buffer.byteLength(v) : v.length);
const headerBytes = (headers: Readonly<Record<string, string>>): number => Object.entries(headers).reduce((n, [k, v]) => n + byteLength(k) + byteLength(v), 0);

/** The first form worth trying for this message's size. */
function firstForm(raw: RawMessage): Form {
  const headers = headerBytes(raw.headers);
  if (headers + byteLength(raw.key) > DEAD_LETTER_MAX_BYTES) return 'minimal';
  return headers + byteLength(raw.key) + byteLength(raw.value) > DEAD_LETTER_MAX_BYTES ? 'no-value' : 'whole';
}

function letterOf(raw: RawMessage, form: Form, dlq: Readonly<Record<string, string>>): { key: Buffer | null; value: Buffer | null; headers: Record<string, string> } {
  if (form === 'whole') return { key: raw.key, value: raw.value, headers: { ...raw.headers, ...dlq } };
  if (form === 'no-value') return { key: raw.key, value: null, headers: { ...raw.headers, 'dlq-value-omitted': 'MESSAGE_TOO_LARGE', ...dlq } };
  const kept = Object.fromEntries(Object.entries(raw.headers).filter(([k, v]) => KEPT_HEADERS.has(k) && byteLength(v) <= 256));
  const key = raw.key && raw.key.length > MAX_KEY_BYTES ? raw.key.subarray(0, MAX_KEY_BYTES) : raw.key;
  return {
    key,
    value: null,
    headers: { ...kept, 'dlq-value-omitted': 'MESSAGE_TOO_LARGE', 'dlq-headers-omitted': 'MESSAGE_TOO_LARGE', ...dlq, 'dlq-error-message': (dlq['dlq-error-message'] ?? '').slice(0, MINIMAL_REASON_CHARS) },
  };
}

/**
 * Publishes a message to the dead-letter topic, retrying until it is there: an unreachable broker
 * must not let the consumer skip it. What retrying cannot fix is a record the topic refuses as too
 * large: then it goes again in the next, smaller form (`Forms`), down to about 2 KiB,
 * with the source coordinates where the original can still be read.
 */
export function createDeadLetter({ producer, topic, groupId, retry, metrics, log }: DeadLetterDeps): DeadLetter {
  return async (raw, code, reason, payload) => {
    let form = firstForm(raw);
    if (form !== 'whole') log.warn({ source: coordinates(raw), bytes: byteLength(raw.value), headerBytes: headerBytes(raw.headers), form }, 'message too large for a dead-letter topic; sending it in a smaller form');
    const dlq = {
      'dlq-error-code': code,
      'dlq-error-message': reason.slice(0, 4000),
      'dlq-source-topic': raw.topic,
      'dlq-source-partition': String(raw.partition),
      'dlq-source-offset': raw.offset,
      'dlq-consumer-group': groupId,
      'dlq-failed-at': new Date().toISOString(),
    };
    for (let attempt = 0; ; attempt++) {
      try {
        await producer.send({ topic, acks: -1, messages: [letterOf(raw, form, dlq)] });
        metrics.deadLettered?.inc({ topic: raw.topic, code });
        log.error({ source: coordinates(raw), code, reason, deadLetterTopic: topic, ...(form === 'whole' ? {} : { form }) }, 'message dead-lettered');
        return 'done';
      } catch (error) {
        const smaller = Forms[Forms.indexOf(form) + 1];
        if (smaller && isTooLarge(error)) {
          log.warn({ source: coordinates(raw), bytes: byteLength(raw.value), headerBytes: headerBytes(raw.headers), form: smaller }, 'dead-letter topic refused the message as too large; sending it in a smaller form');
          form = smaller;
          continue;
        }
        // Counted where stalls are looked for: the partition (and its fetch) waits here until the send succeeds.
        metrics.retries?.inc({ topic: raw.topic, kind: 'dead_letter' });
        log.warn({ err: error, source: coordinates(raw) }, 'dead-letter publish failed; retrying');
        if (!(await waitOrAbort(backoffMs(retry, attempt), payload))) return 'aborted';
      }
    }
  };
}

/** kafkajs reports the broker's MESSAGE_TOO_LARGE / RECORD_LIST_TOO_LARGE directly or wrapped. */
function isTooLarge(error: unknown): boolean {
  for (let e = error as { type?: unknown; cause?: unknown; originalError?: unknown } | undefined, depth = 0; e && depth < 5; depth++) {
    if (e.type === 'MESSAGE_TOO_LARGE' || e.type === 'RECORD_LIST_TOO_LARGE') return true;
    e = (e.originalError ?? e.cause) as typeof e;
  }
  return false;
}
