export * from './ids';
export * from './envelope';
export * from './task-events';
export * from './label-events';
export * from './qa-events';
export * from './billing-events';
export * from './topics';
export * from './errors';
