import type { z } from 'zod';
import type { ServiceName } from './envelope';
import { BillingEvent } from './billing-events';
import { LabelEvent } from './label-events';
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

/** The topic an event type is published on. */
export const topicOf = (type: EventType): TopicKey => ownerOf[type];
