import type { z } from 'zod';
import type { ServiceName } from './envelope';
import { BillingEvent } from './billing-events';
import { LabelEvent, LabelSubmittedV1 } from './label-events';
import { PRELABEL_PROPOSED, PrelabelEvent, prelabelDedupType } from './prelabel-events';
import { QaEvent } from './qa-events';
import { TaskEvent } from './task-events';
import { LatestVersions, versionedTopic } from './upcast';

/** One topic per producing service; the prefix lets tests and tenants run isolated copies. */
export const Topics = {
  task: 'task-events',
  label: 'label-events',
  qa: 'qa-events',
  billing: 'billing-events',
} as const;
export type TopicKey = keyof typeof Topics;

export const topicName = (prefix: string, key: TopicKey): string => `${prefix}.${Topics[key]}`;

const ownerOf: Record<EventType, TopicKey> = {
  TaskCreated: 'task',
  TaskAssigned: 'task',
  TaskReopened: 'task',
  TaskFailed: 'task',
  TaskCancelled: 'task',
  TaskCompleted: 'task',
  LabelSubmitted: 'label',
  QaStarted: 'qa',
  QaPassed: 'qa',
  QaRejected: 'qa',
  QaTimedOut: 'qa',
  BillingCompleted: 'billing',
  BillingFailed: 'billing',
  BillingRefunded: 'billing',
};

/** The newest version of each event type a topic carries. */
const latestOn = (key: TopicKey): Record<string, number> => Object.fromEntries(Object.entries(LatestVersions).filter(([type]) => ownerOf[type as EventType] === key));

/**
 * What a topic carries, as read off the wire: any known version of each of its event types (the
 * `event-version` of every message), parsed to the newest shape; a version newer than this code
 * knows is refused with its own issue (see upcast.ts). `DomainEvent` is that newest shape.
 */
export const TopicSchemas = {
  task: versionedTopic(TaskEvent, latestOn('task')),
  label: versionedTopic(LabelEvent, latestOn('label')),
  qa: versionedTopic(QaEvent, latestOn('qa')),
  billing: versionedTopic(BillingEvent, latestOn('billing')),
} as const satisfies Record<TopicKey, z.ZodType>;

export const TopicOwners = {
  task: 'task-svc',
  label: 'label-svc',
  qa: 'qa-svc',
  billing: 'billing-svc',
} as const satisfies Record<TopicKey, ServiceName>;

export type DomainEvent = TaskEvent | LabelEvent | QaEvent | BillingEvent;
export type EventType = DomainEvent['type'];
export type EventOf<T extends EventType> = Extract<DomainEvent, { type: T }>;

/**
 * The schema of each older version still written (`type@version`), as it is on the wire, before
 * the topic's union lifts it to the newest shape: what a producer of that version may send.
 */
export const OlderVersionSchemas: Readonly<Record<string, z.ZodType>> = { 'LabelSubmitted@1': LabelSubmittedV1 };

/** The topic an event type is published on. */
export const topicOf = (type: EventType): TopicKey => ownerOf[type];

/**
 * Input topics: produced by systems outside labelflow (model workers), consumed by a service
 * through the same exactly-once shell. No service owns them, so their messages carry no
 * `producer`; the consuming service creates the topic if it is missing.
 */
export const InputTopics = {
  prelabels: 'prelabels',
} as const;
export type InputTopicKey = keyof typeof InputTopics;

export const inputTopicName = (prefix: string, key: InputTopicKey): string => `${prefix}.${InputTopics[key]}`;

/** What an input topic carries, read off the wire (a newer version than known is refused, as on the event topics). */
export const InputTopicSchemas = {
  prelabels: versionedTopic(PrelabelEvent, { [PRELABEL_PROPOSED]: 1 }),
} as const satisfies Record<InputTopicKey, z.ZodType>;

export type InputEvent = PrelabelEvent;
export type InputEventType = InputEvent['type'];

const inputOwnerOf: Record<InputEventType, InputTopicKey> = { PrelabelProposed: 'prelabels' };

/** Anything a service's consumer may apply: the saga's events and the input topics' messages. */
export type ConsumedEvent = DomainEvent | InputEvent;
export type ConsumedType = ConsumedEvent['type'];
export type ConsumedOf<T extends ConsumedType> = Extract<ConsumedEvent, { type: T }>;

export const isInputType = (type: string): type is InputEventType => Object.hasOwn(inputOwnerOf, type);

/** Whether `type` names an event or input message type of the contracts (not just any string a message carried). */
export const isConsumedType = (type: string): type is ConsumedType => Object.hasOwn(ownerOf, type) || isInputType(type);

/** The input topic a message type arrives on. */
export const inputTopicOf = (type: InputEventType): InputTopicKey => inputOwnerOf[type];

/** Every type the topic `type` arrives on carries: what a consumer of that topic may find there. */
export const typesOnTopicOf = (type: ConsumedType): readonly ConsumedType[] =>
  isInputType(type)
    ? (Object.keys(inputOwnerOf) as InputEventType[]).filter((t) => inputOwnerOf[t] === inputOwnerOf[type])
    : (Object.keys(ownerOf) as EventType[]).filter((t) => ownerOf[t] === ownerOf[type]);

/** The full topic name a consumed type arrives on. */
export const consumedTopicName = (prefix: string, type: ConsumedType): string => (isInputType(type) ? inputTopicName(prefix, inputOwnerOf[type]) : topicName(prefix, topicOf(type)));

/** The wire schema of the topic a consumed type arrives on. */
export const consumedTopicSchema = (type: ConsumedType): z.ZodType => (isInputType(type) ? InputTopicSchemas[inputOwnerOf[type]] : TopicSchemas[topicOf(type)]);

/**
 * The `eventType` part of a consumed event's dedup key (with its task and attempt): the type for
 * the saga's events, the type with the model name and version for a proposal. Derived here only.
 */
export const dedupTypeOf = (event: ConsumedEvent): string => (event.type === PRELABEL_PROPOSED ? prelabelDedupType(event) : event.type);
