import { DEV_AUDIENCE, DEV_ISSUER, devKeyFile, issueToken, loadOrCreateDevKey, type ProjectRole, type SigningKey } from '@labelflow/auth';

/** Who a simulated user is: the token's subject and what it claims. */
export interface Identity {
  readonly subject: string;
  readonly admin?: boolean;
  readonly projects?: Readonly<Record<string, ProjectRole | readonly ProjectRole[]>>;
}

/** A simulated user: its name (the actor in every event and ledger entry it causes) and its credentials. */
export interface Actor {
  readonly subject: string;
  /** The `Authorization` header value, `Bearer <JWT>`: issued on first use, issued again before it expires. */
  readonly authorization: () => Promise<string>;
}

/** Issues the simulated users' tokens. */
export interface Signer {
  actor(identity: Identity): Actor;
}

export interface SignerOptions {
  /** The services' expected `iss` and `aud`: the local development identity's by default. */
  readonly issuer?: string;
  readonly audience?: string;
  /** Token lifetime; a token is re-issued once half of it has passed, so any run length works. Default 3600. */
  readonly ttlS?: number;
}

/**
 * Signs with `key`. labelflow is a resource server: in production an identity provider issues the
 * tokens; a load driver on a local stack signs its own with the key the services trust.
 */
export function signerFor(key: SigningKey, { issuer = DEV_ISSUER, audience = DEV_AUDIENCE, ttlS = 3600 }: SignerOptions = {}): Signer {
  return {
    actor(identity) {
      let current: { readonly header: Promise<string>; readonly renewAt: number } | undefined;
      return {
        subject: identity.subject,
        authorization: () => {
          if (!current || Date.now() >= current.renewAt) {
            const header = issueToken(key, { issuer, audience, subject: identity.subject, admin: identity.admin ?? false, projects: identity.projects ?? {}, ttlS }).then((token) => `Bearer ${token}`);
            const issued = { header, renewAt: Date.now() + (ttlS * 1000) / 2 };
            current = issued;
            // A failed signing is not cached: the next request tries again.
            header.catch(() => {
              if (current === issued) current = undefined;
            });
          }
          return current.header;
        },
      };
    },
  };
}

/**
 * The local development key (`LABELFLOW_SIGNING_KEY_FILE`, else `.local/auth/dev-signing-key.json`,
 * created on first use): the one `npm start` and the test stacks configure the services with.
 */
export async function devSigner({ keyFile = devKeyFile(), ...options }: SignerOptions & { readonly keyFile?: string } = {}): Promise<Signer> {
  const { privateJwk } = await loadOrCreateDevKey(keyFile);
  return signerFor({ jwk: privateJwk }, options);
}

/** The platform admin every tool acts as: creates projects, cancels, reads /metrics; never works on a task. */
export const ADMIN_SUBJECT = 'producer-admin';

/** How many simulated users of each kind. Rate limits are per subject and service, so load is spread over many. */
export interface CastSize {
  /** Project managers who create tasks and wait for their outcome. Default 4. */
  readonly managers?: number;
  readonly annotators: number;
  /** Reviewers, never one of the annotators (a reviewer who labelled a task may not review it). Default 3. */
  readonly reviewers?: number;
}

/** The simulated users of a run. */
export interface Cast {
  /** Platform admin (`admin: true`, no project role): projects, cancels, top-ups, metrics. */
  readonly admin: Actor;
  /** `manager` in every project of the run: create tasks, wait for their status. */
  readonly managers: readonly Actor[];
  /** `annotator` in every project of the run (`annotator-0` …): claim and label, as themselves. */
  readonly annotators: readonly Actor[];
  /** `reviewer` in every project of the run (`reviewer-0` …): review, as themselves. */
  readonly reviewers: readonly Actor[];
}

export const DEFAULT_MANAGERS = 4;
export const DEFAULT_REVIEWERS = 3;

/** The platform admin of a run; it needs no project, so it exists before the projects do. */
export const adminOf = (signer: Signer, subject = ADMIN_SUBJECT): Actor => signer.actor({ subject, admin: true });

/** The run's users, with their roles in `projectIds` (created by `admin` first). */
export function castFor(signer: Signer, admin: Actor, projectIds: readonly string[], size: CastSize): Cast {
  const inProjects = (role: ProjectRole) => Object.fromEntries(projectIds.map((p) => [p, role]));
  const people = (n: number, prefix: string, role: ProjectRole) => Array.from({ length: n }, (_, i) => signer.actor({ subject: `${prefix}-${i}`, projects: inProjects(role) }));
  return {
    admin,
    managers: people(size.managers ?? DEFAULT_MANAGERS, 'manager', 'manager'),
    annotators: people(size.annotators, 'annotator', 'annotator'),
    reviewers: people(size.reviewers ?? DEFAULT_REVIEWERS, 'reviewer', 'reviewer'),
  };
}
