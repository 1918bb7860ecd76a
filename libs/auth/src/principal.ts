import { z } from 'zod';
import { ActorName, ProjectId, type Result } from '@labelflow/contracts';

/** Roles a person holds in one project, as annotation platforms name them (Label Studio, CVAT). */
export const ProjectRole = { owner: 'owner', manager: 'manager', reviewer: 'reviewer', annotator: 'annotator' } as const;
export type ProjectRole = (typeof ProjectRole)[keyof typeof ProjectRole];
const Role = z.enum([ProjectRole.owner, ProjectRole.manager, ProjectRole.reviewer, ProjectRole.annotator]);

/** The private claim that carries labelflow's authorization, issued by the identity provider. */
export const LABELFLOW_CLAIM = 'labelflow';

/** How many projects one token may name: a token is a header, and headers are bounded. */
export const MAX_PROJECTS_PER_TOKEN = 500;

/**
 * `{ "labelflow": { "admin": true } }` or `{ "labelflow": { "projects": { "<project uuid>": "owner" | ["reviewer", "annotator"] } } }`.
 * Both members are optional, but never together (a platform admin works in no project, see
 * `principalFromClaims`); a token without the claim authenticates a person with no roles.
 */
export const LabelflowClaim = z
  .object({
    admin: z.boolean().optional(),
    projects: z
      .record(z.string(), z.union([Role, z.array(Role).min(1).max(4)]))
      .refine((p) => Object.keys(p).length <= MAX_PROJECTS_PER_TOKEN, `at most ${MAX_PROJECTS_PER_TOKEN} projects`)
      .optional(),
  })
  .strict();
export type LabelflowClaim = z.infer<typeof LabelflowClaim>;

/** Who is calling, as the verified token says. */
export interface Principal {
  /** The token's `sub`: the actor in every event and ledger entry this caller causes. */
  readonly subject: string;
  /** A platform administrator: sees every project, administers any, works in none. */
  readonly admin: boolean;
  readonly projects: ReadonlyMap<ProjectId, ReadonlySet<ProjectRole>>;
}

export const anonymousProjects: ReadonlyMap<ProjectId, ReadonlySet<ProjectRole>> = new Map();

/** Builds the principal from a verified payload; a malformed subject or claim is refused. */
export function principalFromClaims(payload: Readonly<Record<string, unknown>>): Result<Principal> {
  const subject = ActorName.safeParse(payload.sub);
  if (!subject.success) return { ok: false, reason: { code: 'SUBJECT_INVALID', message: 'sub must be 1-128 characters of letters, digits, . _ @ - (it names the actor in events)' } };
  const claim = LabelflowClaim.safeParse(payload[LABELFLOW_CLAIM] ?? {});
  if (!claim.success) return { ok: false, reason: { code: 'CLAIM_INVALID', message: `the ${LABELFLOW_CLAIM} claim is malformed: ${claim.error.issues.map((i) => `${i.path.join('.') || '(claim)'} ${i.message}`).join('; ')}` } };
  // The matrix keeps admins out of paid work (claim, label, review) so that nobody can both move
  // budgets and earn from them. Project roles beside `admin` would give an admin that work through
  // the roles' column; refusing the token says so, where ignoring the roles would leave a caller
  // puzzled by 403s its claim seems to allow.
  if (claim.data.admin === true && Object.keys(claim.data.projects ?? {}).length > 0) {
    return { ok: false, reason: { code: 'CLAIM_INVALID', message: `the ${LABELFLOW_CLAIM} claim makes a platform admin and gives project roles: an admin works in no project, so issue one of the two` } };
  }
  const projects = new Map<ProjectId, ReadonlySet<ProjectRole>>();
  for (const [rawId, roles] of Object.entries(claim.data.projects ?? {})) {
    const projectId = ProjectId.safeParse(rawId);
    if (!projectId.success) return { ok: false, reason: { code: 'CLAIM_INVALID', message: `the ${LABELFLOW_CLAIM} claim names a project that is not a UUID: ${rawId.slice(0, 64)}` } };
    const merged = new Set([...(projects.get(projectId.data) ?? []), ...[roles].flat()]);
    projects.set(projectId.data, merged);
  }
  return { ok: true, value: { subject: subject.data, admin: claim.data.admin === true, projects } };
}

/** The claim for a principal, for issuing tokens (the dev CLI, tests). */
export function claimFor(principal: { admin?: boolean; projects?: Readonly<Record<string, ProjectRole | readonly ProjectRole[]>> }): LabelflowClaim {
  const projects = principal.projects && Object.keys(principal.projects).length > 0 ? (principal.projects as LabelflowClaim['projects']) : undefined;
  return { ...(principal.admin ? { admin: true } : {}), ...(projects ? { projects } : {}) };
}
