export * from './errors';
export * from './key';
export * from './inbox';
export * from './bloom';
export * from './redis-tier';
export * from './gate';
export * from './config';
