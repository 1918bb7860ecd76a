import { randomUUID } from 'node:crypto';
import { OlderVersionSchemas, TopicSchemas, topicName, topicOf, type DomainEvent, type EventId } from '@labelflow/contracts';
import { enqueue, serializeOutboxRows, type Notification, type OutboxMessage } from '@labelflow/outbox';
import { currentTraceHeaders, type TraceHeaders } from '@labelflow/telemetry';
import type { Queryable } from './db';
import { ServiceKitError, ServiceKitErrors } from './errors';
import type { RuntimeName } from './runtime/definition';

type Stamped = 'id' | 'occurredAt' | 'producer' | 'causationId';
type DistributiveOmit<T, K extends PropertyKey> = T extends unknown ? Omit<T, K> : never;

/**
 * What a pure `decide` returns: the event without the fields the shell stamps (id, time, producer,
 * causation), so decisions need no clock or id generator.
 */
export type EventDraft<E extends DomainEvent = DomainEvent> = DistributiveOmit<E, Stamped>;

export interface EmitDeps {
  /** Only the saga's services produce events: one stamped by any other process fails its schema check. */
  readonly producer: RuntimeName;
  readonly topicPrefix: string;
  readonly channel: string;
  readonly now: () => Date;
  /** A new event id (a Snowflake id in the services); a string when one is at hand, a promise when it must wait. */
  readonly newId: () => Promise<string> | string;
}

/** `also`: a notification of the caller's (task signals) sent with the outbox insert, in the same statement. */
export type Emit = (tx: Queryable, drafts: readonly EventDraft[], causationId?: string, also?: Notification) => Promise<readonly DomainEvent[]>;

/** Drafts decided together, with what caused them: the causation id and the trace to continue. */
export interface DraftGroup {
  readonly drafts: readonly EventDraft[];
  readonly causationId?: string;
  /** Trace headers for these drafts' outbox rows; the active context's when absent. */
  readonly trace?: Readonly<Record<string, string>>;
}

/** Emits several groups with one outbox insert and one NOTIFY: a consumed batch's whole output. */
export type EmitMany = (tx: Queryable, groups: readonly DraftGroup[], also?: Notification) => Promise<readonly DomainEvent[]>;

/** Events stamped, checked and serialized before their transaction (see `Prepare`). */
export interface PreparedEvents {
  /** The stamped events, in the drafts' order. */
  readonly events: readonly DomainEvent[];
  /**
   * The outbox rows of every event as the one parameter `appendRowsSql` of @labelflow/outbox
   * reads, and the relay's channel, for a statement that appends them itself (then
   * `pg_notify(channel, '')`).
   */
  readonly outbox: { readonly rows: Buffer; readonly channel: string };
}

/**
 * `emit` in two halves, for a writer that overlaps its work with the database's: the CPU half
 * (ids, stamps, schema checks, JSON) runs while an earlier transaction is in flight, and a
 * statement of the writer's own appends the rows it keeps (`appendRowsSql`). Events are stamped
 * with the time they were prepared.
 */
export type Prepare = (drafts: readonly EventDraft[], causationId?: string, options?: PrepareOptions) => Promise<PreparedEvents>;

export interface PrepareOptions {
  /** The trace the events continue; the active context's when absent (see `requestTrace`). */
  readonly trace?: TraceHeaders;
  /**
   * Which drafts are checked against their schema. `each` (the default) checks every one. `first`
   * is for many drafts made by one builder from input that was itself validated against limits at
   * least as strict as the event's (a bulk import's lines): checking the first catches a builder
   * that is wrong for every draft (a field missing, a constant out of range), and checking the rest
   * again costs 3-5 µs an event for nothing. The builder's own tests must prove the inclusion.
   */
  readonly check?: 'each' | 'first';
}

/** Where `withEmitTrace` leaves a request's trace on the client of its transaction. */
const EMIT_TRACE = Symbol('labelflow.emit-trace');
type TraceCarrier = { [EMIT_TRACE]?: TraceHeaders };

/**
 * Runs `fn` with `trace` as the trace of what is emitted on `tx` without a trace of its own. An
 * HTTP command's transaction gets its request's trace this way when nothing records spans: an
 * active context per request would need an AsyncLocalStorage, which on Node 20 makes every
 * promise of the process dearer (see @labelflow/plumbing's transaction.ts). `undefined` leaves
 * the active context's trace, as when a tracer records.
 */
export async function withEmitTrace<T>(tx: Queryable, trace: TraceHeaders | undefined, fn: () => Promise<T>): Promise<T> {
  if (trace === undefined) return fn();
  const carrier = tx as TraceCarrier;
  const before = carrier[EMIT_TRACE];
  carrier[EMIT_TRACE] = trace;
  try {
    return await fn();
  } finally {
    // Assigned back, not deleted: a pooled client keeps one shape across the requests it serves.
    carrier[EMIT_TRACE] = before;
  }
}

/**
 * Checks an outgoing event against its topic's schema. An event the other services cannot read
 * would be dead-lettered by every one of them while its producer went on as if it had happened, so
 * it fails the producing transaction instead: nothing is committed and the caller hears why.
 */
function checked(event: DomainEvent): DomainEvent {
  const parsed = TopicSchemas[topicOf(event.type)].safeParse(event);
  if (!parsed.success) {
    const problems = parsed.error.issues.slice(0, 5).map((i) => `${i.path.join('.')}: ${i.message}`);
    throw new ServiceKitError(ServiceKitErrors.EVENT_INVALID, `${event.type} does not match its schema: ${problems.join('; ')}`, { details: problems });
  }
  // Readers drop a field their schema does not declare without a word: one added here without a
  // new version would reach the wire, and readers not yet upgraded would act without it. What is
  // sent is the draft itself (a v1 event stays v1), so its fields are held against what parsing kept.
  // An older version is held against its own schema: the upcast to the newest shape adds the new
  // fields (a v1 LabelSubmitted's durationMs as null), which would let the draft's own through.
  const own = OlderVersionSchemas[`${event.type}@${event.version}`]?.safeParse(event);
  const kept = own?.success ? (own.data as DomainEvent).payload : (parsed.data as DomainEvent).payload;
  const extra = undeclared(event.payload, kept, 'payload');
  if (extra.length > 0) {
    throw new ServiceKitError(ServiceKitErrors.EVENT_INVALID, `${event.type} version ${event.version} does not declare ${extra.slice(0, 5).join(', ')}: a new field is a new version of the event (libs/contracts)`, { details: extra });
  }
  return event;
}

/**
 * Paths of `sent` that `kept` (its parse) lacks: fields the schema does not declare. Runs for
 * every event emitted, so it allocates nothing while all is well: a path is spelt out only for a
 * field found missing.
 */
function undeclared(sent: unknown, kept: unknown, root: string): string[] {
  const found: string[] = [];
  const trail: (string | number)[] = [];
  const walk = (s: unknown, k: unknown): void => {
    if (s === null || typeof s !== 'object' || k === null || typeof k !== 'object') return;
    if (Array.isArray(s)) {
      if (!Array.isArray(k)) return;
      for (let i = 0; i < s.length; i++) {
        trail.push(i);
        walk(s[i], k[i]);
        trail.pop();
      }
      return;
    }
    for (const key in s) {
      if (!Object.hasOwn(s, key)) continue;
      const value = (s as Record<string, unknown>)[key];
      if (!Object.hasOwn(k, key)) {
        if (value !== undefined) found.push([root, ...trail, key].join('.'));
        continue;
      }
      trail.push(key);
      walk(value, (k as Record<string, unknown>)[key]);
      trail.pop();
    }
  };
  walk(sent, kept);
  return found;
}

/**
 * A draft with the shell's stamps: the envelope spelt out field by field, which costs V8 a
 * fraction of what `{ ...draft, id, occurredAt, producer }` does (see emitMany's headers).
 */
function stamp(d: EventDraft, id: EventId, occurredAt: string, producer: RuntimeName, causationId: string | undefined): DomainEvent {
  const e = { id, type: d.type, version: d.version, taskId: d.taskId, projectId: d.projectId, attempt: d.attempt, occurredAt, producer, payload: d.payload } as Record<string, unknown>;
  if (causationId) e['causationId'] = causationId;
  return e as unknown as DomainEvent;
}

/** Stamps drafts into full events and appends them to the outbox inside the caller's transaction. */
export function createEmitter(deps: EmitDeps): { readonly emit: Emit; readonly emitMany: EmitMany; readonly prepare: Prepare } {
  const topics = new Map<string, string>();
  const topicOfType = (type: DomainEvent['type']): string => {
    let topic = topics.get(type);
    if (topic === undefined) topics.set(type, (topic = topicName(deps.topicPrefix, topicOf(type))));
    return topic;
  };
  /** The groups' drafts as checked events and their outbox messages, in order. */
  const build = async (groups: readonly DraftGroup[], checkAll = true, fallbackTrace?: TraceHeaders) => {
    const events: DomainEvent[] = [];
    const messages: OutboxMessage[] = [];
    // Events written in one transaction happen at one instant.
    const occurredAt = deps.now().toISOString();
    for (const { drafts, causationId, trace = fallbackTrace ?? currentTraceHeaders() } of groups) {
      // A group's events of one type share one headers object (read-only from here on), so that
      // serializeOutboxRows writes their JSON once: an import batch is 1,000 TaskCreated.
      const headersOf = new Map<string, Readonly<Record<string, string>>>();
      for (const d of drafts) {
        // Ids come synchronously while the generator has them: no await per outgoing event.
        const next = deps.newId();
        const id = (typeof next === 'string' ? next : await next) as EventId;
        const stamped = stamp(d, id, occurredAt, deps.producer, causationId);
        const e = checkAll || events.length === 0 ? checked(stamped) : stamped;
        events.push(e);
        const kind = `${e.type}@${e.version}`;
        let headers = headersOf.get(kind);
        if (headers === undefined) {
          // Not `{ ...trace, 'event-type': … }`: V8 (Node 20) takes a slow path, microseconds per
          // object, for a spread followed by properties the source lacks.
          const made: Record<string, string> = Object.assign({}, trace);
          made['event-type'] = e.type;
          made['event-version'] = String(e.version);
          headersOf.set(kind, (headers = made));
        }
        messages.push({ topic: topicOfType(e.type), key: e.taskId, eventId: e.id, eventType: e.type, payload: e, headers });
      }
    }
    return { events, messages };
  };
  const emitMany: EmitMany = async (tx, groups, also) => {
    const { events, messages } = await build(groups, true, (tx as TraceCarrier)[EMIT_TRACE]);
    await enqueue(tx, deps.channel, messages, also);
    return events;
  };
  const emit: Emit = (tx, drafts, causationId, also) => emitMany(tx, [{ drafts, ...(causationId ? { causationId } : {}) }], also);
  const prepare: Prepare = async (drafts, causationId, options) => {
    const { events, messages } = await build([{ drafts, ...(causationId ? { causationId } : {}) }], options?.check !== 'first', options?.trace);
    return { events, outbox: { rows: serializeOutboxRows(messages), channel: deps.channel } };
  };
  return { emit, emitMany, prepare };
}

export const uuidIds = () => randomUUID();
