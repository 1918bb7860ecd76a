export * from './definition';
export * from './build';
export * from './listen';
