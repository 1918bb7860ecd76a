export * from './errors';
export * from './schema';
export * from './store';
export * from './relay';
export type { Publisher, PublishedMessage, Queryable } from './types';
