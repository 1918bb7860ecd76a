import type { ProjectId } from '@labelflow/contracts';
import { AuthErrors } from './errors';
import { ProjectRole, type Principal } from './principal';

/** Everything an endpoint can ask permission for. One row of the matrix each. */
export const Permission = {
  projectCreate: 'project.create',
  projectRead: 'project.read',
  projectTopUp: 'project.top-up',
  taskCreate: 'task.create',
  taskRead: 'task.read',
  taskClaim: 'task.claim',
  taskCancel: 'task.cancel',
  labelsSubmit: 'labels.submit',
  labelsRead: 'labels.read',
  reviewDecide: 'review.decide',
  reviewRead: 'review.read',
  billingRead: 'billing.read',
  billingRetry: 'billing.retry',
  /** Who did the work (assignees, annotator and reviewer ids, other people's payouts). */
  peopleRead: 'people.read',
  metricsRead: 'metrics.read',
} as const;
export type Permission = (typeof Permission)[keyof typeof Permission];

const { owner, manager, reviewer, annotator } = ProjectRole;
const everyone = [owner, manager, reviewer, annotator] as const;

/**
 * The permission matrix, the one place roles are given rights. `admin`: platform administrators,
 * who administer every project and work in none (they never claim, label or review, so they can
 * never pay themselves). `roles`: project roles that hold it in their own projects; `null` marks a
 * platform-wide permission no project role grants.
 */
export const PermissionMatrix: Readonly<Record<Permission, { readonly admin: boolean; readonly roles: readonly ProjectRole[] | null }>> = {
  [Permission.projectCreate]: { admin: true, roles: null },
  [Permission.metricsRead]: { admin: true, roles: null },
  [Permission.projectRead]: { admin: true, roles: [owner, manager] },
  [Permission.projectTopUp]: { admin: true, roles: [owner] },
  [Permission.taskCreate]: { admin: true, roles: [owner, manager] },
  [Permission.taskRead]: { admin: true, roles: everyone },
  [Permission.taskClaim]: { admin: false, roles: [annotator] },
  [Permission.taskCancel]: { admin: true, roles: [owner, manager] },
  [Permission.labelsSubmit]: { admin: false, roles: [annotator] },
  [Permission.labelsRead]: { admin: true, roles: everyone },
  [Permission.reviewDecide]: { admin: false, roles: [owner, manager, reviewer] },
  [Permission.reviewRead]: { admin: true, roles: everyone },
  [Permission.billingRead]: { admin: true, roles: [owner, manager] },
  [Permission.billingRetry]: { admin: true, roles: [owner, manager] },
  [Permission.peopleRead]: { admin: true, roles: [owner, manager] },
};

export type AuthorizationDenied = { readonly status: 403 | 404; readonly code: string; readonly message: string };
export type Authorization = { readonly ok: true } | { readonly ok: false; readonly reason: AuthorizationDenied };

/** Whether the caller may see anything of the project at all (any role, or a platform admin). */
export const canSeeProject = (principal: Principal, projectId: ProjectId): boolean => principal.admin || principal.projects.has(projectId);

/** The caller's projects where a role grants `permission`. */
export function projectsWith(principal: Principal, permission: Permission): ProjectId[] {
  const { roles } = PermissionMatrix[permission];
  if (!roles) return [];
  return [...principal.projects].filter(([, held]) => roles.some((r) => held.has(r))).map(([id]) => id);
}

/** Whether `principal` holds `permission` in `projectId` (a platform-wide permission: `null`), without the why. */
export function can(principal: Principal, permission: Permission, projectId: ProjectId | null): boolean {
  const { admin, roles } = PermissionMatrix[permission];
  if (principal.admin && admin) return true;
  if (projectId === null || !roles) return false;
  const held = principal.projects.get(projectId);
  return held !== undefined && roles.some((r) => held.has(r));
}

/**
 * Decides one request. A project the caller has no part in answers 404 as if it did not exist, so
 * ids cannot be probed across tenants; a visible project without the right answers 403.
 * `notFound` is the code and message the resource's own 404 would use.
 */
export function authorize(principal: Principal, permission: Permission, projectId: ProjectId | null, notFound: { code: string; message: string }): Authorization {
  if (can(principal, permission, projectId)) return { ok: true };
  if (projectId !== null && !canSeeProject(principal, projectId)) return { ok: false, reason: { status: 404, ...notFound } };
  return { ok: false, reason: { status: 403, code: AuthErrors.FORBIDDEN, message: `${describe(principal, projectId)} may not ${permission}` } };
}

function describe(principal: Principal, projectId: ProjectId | null): string {
  const roles = projectId === null ? [] : [...(principal.projects.get(projectId) ?? [])];
  const as = [principal.admin ? 'platform admin' : '', ...roles].filter(Boolean).join(', ');
  return `${principal.subject}${as ? ` (${as})` : ''}`;
}
