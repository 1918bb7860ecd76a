export * from './errors';
export * from './key';
export * from './store';
export * from './redis-tier';
export * from './plugin';
