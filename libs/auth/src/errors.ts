import { LabelflowError } from '@labelflow/contracts';

export const AuthErrors = {
  /** No `Authorization: Bearer` header. */
  TOKEN_MISSING: 'TOKEN_MISSING',
  /** A token that does not verify: signature, algorithm, issuer, audience, times or claims. */
  TOKEN_INVALID: 'TOKEN_INVALID',
  /** Authenticated, allowed to see the resource, not allowed to do this to it. */
  FORBIDDEN: 'FORBIDDEN',
  /** Too many requests from one subject; retry after the given delay. */
  RATE_LIMITED: 'RATE_LIMITED',
  /** Key sources and claims settings that cannot work together. */
  CONFIG_INVALID: 'AUTH_CONFIG_INVALID',
  /** The JWKS endpoint did not answer: the token may be fine, so this is retriable. */
  KEYS_UNAVAILABLE: 'AUTH_KEYS_UNAVAILABLE',
} as const;
export type AuthErrorCode = (typeof AuthErrors)[keyof typeof AuthErrors];

export class AuthError extends LabelflowError<AuthErrorCode> {}
