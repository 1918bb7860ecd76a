export { PlumbingError, PlumbingErrors, type PlumbingErrorCode } from './errors';
export * from './queryable';
export * from './pg-array';
export * from './prepared';
export * from './transient';
export * from './transaction';
export * from './breaker';
export * from './lua';
export * from './redis-guard';
