import { randomUUID } from 'node:crypto';
import { TopicSchemas, topicName, topicOf, type DomainEvent, type EventId, type ServiceName } from '@labelflow/contracts';
import { enqueue, type OutboxMessage } from '@labelflow/outbox';
import { currentTraceHeaders } from '@labelflow/telemetry';
import type { Queryable } from './db';
import { ServiceKitError, ServiceKitErrors } from './errors';

type Stamped = 'id' | 'occurredAt' | 'producer' | 'causationId';
type DistributiveOmit<T, K extends PropertyKey> = T extends unknown ? Omit<T, K> : never;

/**
 * What a pure `decide` returns: the event without the fields the shell stamps (id, time, producer,
 * causation), so decisions need no clock or id generator.
 */
export type EventDraft<E extends DomainEvent = DomainEvent> = DistributiveOmit<E, Stamped>;

export interface EmitDeps {
  readonly producer: ServiceName;
  readonly topicPrefix: string;
  readonly channel: string;
  readonly now: () => Date;
  /** A new event id (a Snowflake id in the services). */
  readonly newId: () => Promise<string> | string;
}

export type Emit = (tx: Queryable, drafts: readonly EventDraft[], causationId?: string) => Promise<readonly DomainEvent[]>;

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

/** Stamps drafts into full events and appends them to the outbox inside the caller's transaction. */
export function createEmitter(deps: EmitDeps): Emit {
  return async (tx, drafts, causationId) => {
    const events: DomainEvent[] = [];
    for (const d of drafts) {
      const id = (await deps.newId()) as EventId;
      events.push(checked({ ...d, id, occurredAt: deps.now().toISOString(), producer: deps.producer, ...(causationId ? { causationId } : {}) } as DomainEvent));
    }
    const trace = currentTraceHeaders();
    const messages: OutboxMessage[] = events.map((e) => ({
      topic: topicName(deps.topicPrefix, topicOf(e.type)),
      key: e.taskId,
      eventId: e.id,
      eventType: e.type,
      payload: e,
      headers: { ...trace, 'event-type': e.type, 'event-version': String(e.version) },
    }));
    await enqueue(tx as Parameters<typeof enqueue>[0], deps.channel, messages);
    return events;
  };
}

export const uuidIds = () => randomUUID();
