import type { EachBatchPayload, Producer } from 'kafkajs';
import type { Logger } from '@labelflow/telemetry';
import { coordinates, type RawMessage } from './codec';
import type { ConsumerMetrics } from './consumer-metrics';
import { backoffMs, waitOrAbort, type RetryPolicy, type Step } from './consumer-retry';

export interface DeadLetterDeps {
  /** An idempotent producer of its own, connected and disconnected by the loop. */
  readonly producer: Producer;
  readonly topic: string;
  readonly groupId: string;
  readonly retry: RetryPolicy;
  readonly metrics: ConsumerMetrics;
  readonly log: Logger;
}

export type DeadLetter = (raw: RawMessage, code: string, reason: string, payload: EachBatchPayload) => Promise<Step>;

/**
 * Publishes a message to the dead-letter topic, retrying until it is there: an unreachable broker
 * must not let the consumer skip it. The one failure that retrying cannot fix is a message the
 * dead-letter topic refuses as too large (it arrived compressed, or the topic's limit is lower):
 * then the record goes without its value, with every header and the source coordinates, where
 * the original can still be read.
 */
export function createDeadLetter({ producer, topic, groupId, retry, metrics, log }: DeadLetterDeps): DeadLetter {
  return async (raw, code, reason, payload) => {
    let omitValue = false;
    for (let attempt = 0; ; attempt++) {
      try {
        await producer.send({
          topic,
          acks: -1,
          messages: [{
            key: raw.key,
            value: omitValue ? null : raw.value,
            headers: {
              ...raw.headers,
              ...(omitValue ? { 'dlq-value-omitted': 'MESSAGE_TOO_LARGE' } : {}),
              'dlq-error-code': code,
              'dlq-error-message': reason.slice(0, 4000),
              'dlq-source-topic': raw.topic,
              'dlq-source-partition': String(raw.partition),
              'dlq-source-offset': raw.offset,
              'dlq-consumer-group': groupId,
              'dlq-failed-at': new Date().toISOString(),
            },
          }],
        });
        metrics.deadLettered?.inc({ topic: raw.topic, code });
        log.error({ source: coordinates(raw), code, reason, deadLetterTopic: topic }, 'message dead-lettered');
        return 'done';
      } catch (error) {
        if (!omitValue && isTooLarge(error)) {
          log.warn({ source: coordinates(raw), bytes: raw.value?.length }, 'dead-letter topic refused the message as too large; sending it without its value');
          omitValue = true;
          continue;
        }
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
