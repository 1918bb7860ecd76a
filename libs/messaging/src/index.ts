export * from './errors';
export * from './kafka';
export * from './publisher';
export * from './codec';
export * from './consumer';
export { EVENT_TYPE_HEADER, type BatchProcessor, type Delivery, type DeliveryOutcome, type MessageMeta, type TopicBinding } from './consumer-batch';
export type { RetryPolicy } from './consumer-retry';
export type { ConsumerHealth, ConsumerState, RestartPolicy } from './consumer-supervision';
export * from './partitioner';
