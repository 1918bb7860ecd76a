import { DEV_AUDIENCE, DEV_ISSUER, issueToken, loadOrCreateDevKey, type DevKey, type ProjectRole } from '@labelflow/auth';

/** Who a test request acts as: the token's subject, platform admin or not, roles per project. */
export interface TestIdentity {
  readonly user: string;
  readonly admin?: boolean;
  readonly projects?: Readonly<Record<string, ProjectRole | readonly ProjectRole[]>>;
}

/** The platform admin test clients act as unless told otherwise. */
export const ADMIN: TestIdentity = { user: 'e2e-admin', admin: true };

/** Identities with one role in one project. */
export const as = {
  admin: (user = ADMIN.user): TestIdentity => ({ user, admin: true }),
  owner: (user: string, projectId: string): TestIdentity => ({ user, projects: { [projectId]: 'owner' } }),
  manager: (user: string, projectId: string): TestIdentity => ({ user, projects: { [projectId]: 'manager' } }),
  reviewer: (user: string, projectId: string): TestIdentity => ({ user, projects: { [projectId]: 'reviewer' } }),
  annotator: (user: string, projectId: string): TestIdentity => ({ user, projects: { [projectId]: 'annotator' } }),
};

/**
 * The environment a service needs to accept the test tokens (the local development key), which
 * it trusts only in a development or test environment.
 */
export async function authEnv(): Promise<Record<string, string>> {
  const key = await devKey();
  return { NODE_ENV: 'test', AUTH_ISSUER: DEV_ISSUER, AUTH_AUDIENCE: DEV_AUDIENCE, AUTH_PUBLIC_KEYS: JSON.stringify(key.publicJwks) };
}

let key: Promise<DevKey> | undefined;
const devKey = () => (key ??= loadOrCreateDevKey());
const tokens = new Map<string, Promise<string>>();

/** A bearer token for `identity`, valid for a day (cached per identity). */
export function tokenFor(identity: TestIdentity): Promise<string> {
  const id = JSON.stringify(identity);
  let token = tokens.get(id);
  if (!token) {
    token = devKey().then(({ privateJwk }) => issueToken({ jwk: privateJwk }, { issuer: DEV_ISSUER, audience: DEV_AUDIENCE, subject: identity.user, admin: identity.admin ?? false, projects: identity.projects ?? {}, ttlS: 86_400 }));
    tokens.set(id, token);
  }
  return token;
}
