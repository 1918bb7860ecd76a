export * from './errors';
export * from './schema';
export * from './store';
export * from './relay';
export { DEFAULT_MAX_BATCH_BYTES, MESSAGE_OVERHEAD_BYTES, isTooLarge, sizeOf } from './relay-batch';
export type { Publisher, PublishedMessage, Queryable } from './types';
