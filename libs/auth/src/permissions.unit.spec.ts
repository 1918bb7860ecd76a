import { describe, expect, it } from 'vitest';
import type { ProjectId } from '@labelflow/contracts';
import { authorize, can, Permission, PermissionMatrix, projectsWith } from './permissions';
import { ProjectRole, principalFromClaims, type Principal } from './principal';

const own = '11111111-1111-4111-8111-111111111111' as ProjectId;
const other = '22222222-2222-4222-8222-222222222222' as ProjectId;
const notFound = { code: 'THING_NOT_FOUND', message: 'no such thing' };
const roles = Object.values(ProjectRole);
const person = (role: ProjectRole): Principal => ({ subject: `a-${role}`, admin: false, projects: new Map([[own, new Set([role])]]) });
const admin: Principal = { subject: 'root', admin: true, projects: new Map() };

// The matrix as the API documentation states it (docs/http-api.md): a change to either must be deliberate.
const expected: Record<Permission, { admin: boolean; roles: readonly ProjectRole[] }> = {
  'project.create': { admin: true, roles: [] },
  'metrics.read': { admin: true, roles: [] },
  'project.read': { admin: true, roles: ['owner', 'manager'] },
  'project.top-up': { admin: true, roles: ['owner'] },
  'task.create': { admin: true, roles: ['owner', 'manager'] },
  'task.read': { admin: true, roles: ['owner', 'manager', 'reviewer', 'annotator'] },
  'task.claim': { admin: false, roles: ['annotator'] },
  'task.cancel': { admin: true, roles: ['owner', 'manager'] },
  'labels.submit': { admin: false, roles: ['annotator'] },
  'labels.read': { admin: true, roles: ['owner', 'manager', 'reviewer', 'annotator'] },
  'review.decide': { admin: false, roles: ['owner', 'manager', 'reviewer'] },
  'review.read': { admin: true, roles: ['owner', 'manager', 'reviewer', 'annotator'] },
  'billing.read': { admin: true, roles: ['owner', 'manager'] },
  'billing.retry': { admin: true, roles: ['owner', 'manager'] },
  'people.read': { admin: true, roles: ['owner', 'manager'] },
};

describe('the permission matrix', () => {
  it('names every permission once', () => {
    expect(Object.keys(PermissionMatrix).sort()).toEqual(Object.values(Permission).sort());
    expect(Object.keys(expected).sort()).toEqual(Object.values(Permission).sort());
  });

  for (const permission of Object.values(Permission)) {
    describe(permission, () => {
      for (const role of roles) {
        const allowed = expected[permission].roles.includes(role);
        it(`${allowed ? 'is granted to' : 'is refused to'} a ${role} in their own project, and answers 404 for another project`, () => {
          const p = person(role);
          const mine = authorize(p, permission, own, notFound);
          expect(mine.ok).toBe(allowed);
          if (!mine.ok) expect(mine.reason).toMatchObject({ status: 403, code: 'FORBIDDEN' });
          const theirs = authorize(p, permission, other, notFound);
          expect(theirs).toEqual({ ok: false, reason: { status: 404, ...notFound } });
        });
      }
      it(`${expected[permission].admin ? 'is granted to' : 'is refused to'} a platform admin in any project`, () => {
        expect(can(admin, permission, own)).toBe(expected[permission].admin);
        expect(can(admin, permission, other)).toBe(expected[permission].admin);
        const decision = authorize(admin, permission, other, notFound);
        if (!decision.ok) expect(decision.reason.status).toBe(403);
      });
      it('is refused to a caller with no role anywhere', () => {
        const nobody: Principal = { subject: 'x', admin: false, projects: new Map() };
        expect(can(nobody, permission, own)).toBe(false);
      });
    });
  }

  it('lists the projects where a role grants a permission', () => {
    const both: Principal = { subject: 'm', admin: false, projects: new Map<ProjectId, ReadonlySet<ProjectRole>>([[own, new Set<ProjectRole>(['annotator'])], [other, new Set<ProjectRole>(['manager'])]]) };
    expect(projectsWith(both, Permission.taskClaim)).toEqual([own]);
    expect(projectsWith(both, Permission.peopleRead)).toEqual([other]);
    expect(projectsWith(both, Permission.taskRead).sort()).toEqual([own, other].sort());
  });
});

describe('the labelflow claim', () => {
  it('merges a role list and lower-cases project ids', () => {
    const result = principalFromClaims({ sub: 'ann', labelflow: { projects: { [own.toUpperCase()]: ['reviewer', 'annotator'] } } });
    expect(result.ok).toBe(true);
    if (result.ok) expect([...(result.value.projects.get(own) ?? [])].sort()).toEqual(['annotator', 'reviewer']);
  });

  it('treats a token without the claim as a person with no roles', () => {
    const result = principalFromClaims({ sub: 'ann' });
    expect(result).toMatchObject({ ok: true, value: { subject: 'ann', admin: false } });
  });

  it('refuses a platform admin who also holds project roles, which would let an admin claim, label and review', () => {
    const result = principalFromClaims({ sub: 'root', labelflow: { admin: true, projects: { [own]: ['annotator', 'reviewer'] } } });
    expect(result).toMatchObject({ ok: false, reason: { code: 'CLAIM_INVALID' } });
    if (!result.ok) expect(result.reason.message).toContain('an admin works in no project');
  });

  it('accepts a platform admin with an empty project map, which names no role', () => {
    expect(principalFromClaims({ sub: 'root', labelflow: { admin: true, projects: {} } })).toMatchObject({ ok: true, value: { admin: true } });
  });

  it('refuses unknown members, so a misspelt claim is not silently ignored', () => {
    expect(principalFromClaims({ sub: 'ann', labelflow: { admn: true } }).ok).toBe(false);
  });
});
