export * from './errors';
export * from './kafka';
export * from './codec';
export * from './consumer';
