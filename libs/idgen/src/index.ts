export * from './errors';
export * from './types';
export * from './schema';
export * from './snowflake';
export * from './lease';
export * from './segments';
