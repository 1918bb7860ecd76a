import { randomUUID } from 'node:crypto';
import { TopicSchemas, topicName, topicOf, type DomainEvent, type EventId } from '@labelflow/contracts';
import { enqueue, type Notification, type OutboxMessage } from '@labelflow/outbox';
import { currentTraceHeaders } from '@labelflow/telemetry';
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

/**
 * Checks an outgoing event against its topic's schema. An event the other services cannot read
 * would be dead-lettered by every one of them while its producer went on as if it had happened, so
 * it fails the producing transaction instead: nothing is committed and the caller hears why.
 */
function checked(event: DomainEvent): DomainEvent {
  const parsed = TopicSchemas[topicOf(event.type)].safeParse(event);
  if (parsed.success) return event;
  const problems = parsed.error.issues.slice(0, 5).map((i) => `${i.path.join('.')}: ${i.message}`);
  throw new ServiceKitError(ServiceKitErrors.EVENT_INVALID, `${event.type} does not match its schema: ${problems.join('; ')}`, { details: problems });
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
export function createEmitter(deps: EmitDeps): { readonly emit: Emit; readonly emitMany: EmitMany } {
  const topics = new Map<string, string>();
  const topicOfType = (type: DomainEvent['type']): string => {
    let topic = topics.get(type);
    if (topic === undefined) topics.set(type, (topic = topicName(deps.topicPrefix, topicOf(type))));
    return topic;
  };
  const emitMany: EmitMany = async (tx, groups, also) => {
    const events: DomainEvent[] = [];
    const messages: OutboxMessage[] = [];
    // Events written in one transaction happen at one instant.
    const occurredAt = deps.now().toISOString();
    for (const { drafts, causationId, trace = currentTraceHeaders() } of groups) {
      for (const d of drafts) {
        // Ids come synchronously while the generator has them: no await per outgoing event.
        const next = deps.newId();
        const id = (typeof next === 'string' ? next : await next) as EventId;
        const e = checked(stamp(d, id, occurredAt, deps.producer, causationId));
        events.push(e);
        // Not `{ ...trace, 'event-type': … }`: V8 (Node 20) takes a slow path, microseconds per
        // object, for a spread followed by properties the source lacks; this runs per event.
        const headers: Record<string, string> = Object.assign({}, trace);
        headers['event-type'] = e.type;
        headers['event-version'] = String(e.version);
        messages.push({ topic: topicOfType(e.type), key: e.taskId, eventId: e.id, eventType: e.type, payload: e, headers });
      }
    }
    await enqueue(tx, deps.channel, messages, also);
    return events;
  };
  const emit: Emit = (tx, drafts, causationId, also) => emitMany(tx, [{ drafts, ...(causationId ? { causationId } : {}) }], also);
  return { emit, emitMany };
}

export const uuidIds = () => randomUUID();
