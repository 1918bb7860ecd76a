/**
 * Who is calling, as the gateway in front of the services says (labelflow trusts these headers
 * and authenticates no one itself): `x-labelflow-user`, and `x-labelflow-role: admin` for admins.
 */
export const CallerHeaders = { user: 'x-labelflow-user', role: 'x-labelflow-role' } as const;

export interface Caller {
  readonly user: string;
  readonly admin: boolean;
}

export function callerOf(headers: Readonly<Record<string, string | string[] | undefined>>): Caller {
  const one = (v: string | string[] | undefined) => (Array.isArray(v) ? v[0] : v) ?? '';
  return { user: one(headers[CallerHeaders.user]) || 'anonymous', admin: one(headers[CallerHeaders.role]) === 'admin' };
}
