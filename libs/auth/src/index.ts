export * from './errors';
export * from './principal';
export * from './permissions';
export * from './verifier';
export { DEFAULT_JWKS_STALE_MAX_MS, JWKS_CACHE_MAX_AGE_MS, JWKS_COOLDOWN_MS, JWKS_REFRESH_WAIT_MS } from './remote-keys';
export * from './issuer';
export * from './dev-keys';
export * from './rate-limit';
export * from './plugin';
