export * from './errors';
export * from './principal';
export * from './permissions';
export * from './verifier';
export * from './issuer';
export * from './dev-keys';
export * from './rate-limit';
export * from './plugin';
