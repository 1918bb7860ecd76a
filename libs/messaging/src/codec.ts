import type { z } from 'zod';
import { EnvelopeHeader, unsupportedVersion } from '@labelflow/contracts';
import { hasJsonStringLongerThan, V8_LENGTH_HASHED_STRING } from '@labelflow/plumbing';
import { MessagingErrors } from './errors';

export interface RawMessage {
  readonly topic: string;
  readonly partition: number;
  readonly offset: string;
  readonly key: Buffer | null;
  readonly value: Buffer | null;
  readonly headers: Readonly<Record<string, string>>;
}

export type Decoded<E> =
  | { readonly ok: true; readonly event: E }
  | { readonly ok: false; readonly reason: { readonly code: string; readonly message: string } };

/** `topic/partition@offset`: where a message can be found again. */
export const coordinates = (m: Pick<RawMessage, 'topic' | 'partition' | 'offset'>): string => `${m.topic}/${m.partition}@${m.offset}`;

/**
 * Parses and validates a message against its topic's union. Never throws: garbage is a result the
 * consumer routes to the dead-letter topic, not a crash. With the contracts' topic schemas, any
 * known version decodes to the newest shape, and a newer version than they know is
 * VERSION_UNSUPPORTED: kept in the dead-letter topic whole, for a replay once this consumer knows it.
 */
export function decodeMessage<S extends z.ZodType>(schema: S, message: RawMessage): Decoded<z.infer<S>> {
  if (!message.value || message.value.length === 0) {
    return { ok: false, reason: { code: MessagingErrors.DECODE_FAILED, message: 'empty message value' } };
  }
  // Anyone who may write to a topic (a model worker on the pre-label topic) could otherwise send
  // keys that make JSON.parse quadratic: no event holds a string near this long.
  if (hasJsonStringLongerThan(message.value, V8_LENGTH_HASHED_STRING)) {
    return { ok: false, reason: { code: MessagingErrors.DECODE_FAILED, message: `value holds a string over ${V8_LENGTH_HASHED_STRING} bytes, longer than any field of any event` } };
  }
  let json: unknown;
  try {
    json = JSON.parse(message.value.toString('utf8'));
  } catch (error) {
    return { ok: false, reason: { code: MessagingErrors.DECODE_FAILED, message: `value is not JSON: ${(error as Error).message}` } };
  }
  const parsed = schema.safeParse(json);
  if (!parsed.success) {
    const newer = unsupportedVersion(parsed.error.issues);
    if (newer) {
      const message = `${newer.type} version ${newer.version} is newer than this consumer knows (up to version ${newer.latest}); replay it once the consumer is upgraded`;
      return { ok: false, reason: { code: MessagingErrors.VERSION_UNSUPPORTED, message } };
    }
    const unknownType = unknownTypeOf(parsed.error.issues, json);
    if (unknownType) {
      const message = `${unknownType.type} is an event type this consumer does not know (its topic carries ${unknownType.known.join(', ')}); replay it once the consumer is upgraded, or purge it if this service never needs it`;
      return { ok: false, reason: { code: MessagingErrors.TYPE_UNSUPPORTED, message } };
    }
    const problems = parsed.error.issues.slice(0, 5).map((i) => `${i.path.join('.') || '(root)'}: ${i.message}`);
    return { ok: false, reason: { code: MessagingErrors.SCHEMA_INVALID, message: `schema validation failed: ${problems.join('; ')}` } };
  }
  const key = message.key?.toString('utf8');
  const taskId = (parsed.data as { taskId?: string }).taskId;
  if (key !== undefined && taskId !== undefined && key !== taskId) {
    return { ok: false, reason: { code: MessagingErrors.SCHEMA_INVALID, message: `message key ${key} does not match taskId ${taskId}` } };
  }
  return { ok: true, event: parsed.data };
}

/**
 * A new type on a topic, not garbage: the union found no schema for its `type` while the rest
 * of the envelope is well formed. Undefined otherwise.
 */
function unknownTypeOf(issues: readonly z.core.$ZodIssue[], json: unknown): { readonly type: string; readonly known: readonly string[] } | undefined {
  const issue = issues.find((i) => i.code === 'invalid_union' && i.path.length === 1 && i.path[0] === 'type');
  const known = (issue as { options?: unknown } | undefined)?.options;
  if (!Array.isArray(known)) return undefined;
  const header = EnvelopeHeader.safeParse(json);
  return header.success ? { type: header.data.type, known: known.map(String) } : undefined;
}

type HeaderValue = Buffer | string | null | undefined;

/**
 * Kafka headers arrive as Buffers (or arrays of them); handlers see plain strings. A header sent
 * with a null value (Java clients and kafkajs allow it) is treated as absent.
 */
export function headersToStrings(headers: Record<string, HeaderValue | HeaderValue[]> | undefined): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(headers ?? {})) {
    const first = Array.isArray(v) ? v[0] : v;
    if (first !== undefined && first !== null) out[k] = first.toString();
  }
  return out;
}
