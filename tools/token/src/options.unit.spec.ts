import { describe, expect, it } from 'vitest';
import { parseTokenArgs, TokenUsageError, type TokenOptions } from './options';

const P = '0b9a3c4e-5f61-4d7a-8b9c-0d1e2f3a4b5c';
const parse = (argv: string[], env: Record<string, string> = {}): TokenOptions => {
  const parsed = parseTokenArgs(argv, env);
  if (parsed.help) throw new Error('unexpected --help');
  return parsed.options;
};
const refusal = (argv: string[]): string => {
  try {
    parseTokenArgs(argv, {});
  } catch (error) {
    expect(error).toBeInstanceOf(TokenUsageError);
    return (error as Error).message;
  }
  throw new Error(`${argv.join(' ')} was accepted`);
};

describe('the token command line (parseTokenArgs)', () => {
  it('signs for the issuer and audience the services verify, from AUTH_ISSUER and AUTH_AUDIENCE, else the development ones', () => {
    expect(parse(['--user', 'ann', '--role', 'admin'])).toEqual({ user: 'ann', grant: { admin: true }, keyFile: '.local/auth/dev-signing-key.json', issuer: 'labelflow-dev', audience: 'labelflow' });
    const env = { AUTH_ISSUER: 'https://id.example.com/', AUTH_AUDIENCE: 'labelflow-staging', LABELFLOW_SIGNING_KEY_FILE: '/keys/k.json' };
    expect(parse(['--user', 'ann', '--role', 'manager', '--project', P], env)).toEqual({ user: 'ann', grant: { project: P, role: 'manager' }, keyFile: '/keys/k.json', issuer: 'https://id.example.com/', audience: 'labelflow-staging' });
    // An empty variable is an unset one, as for the services.
    expect(parse(['--user', 'ann', '--role', 'admin'], { AUTH_ISSUER: '', AUTH_AUDIENCE: '' })).toMatchObject({ issuer: 'labelflow-dev', audience: 'labelflow' });
  });

  it('answers --help with the usage, whatever else is given', () => {
    expect(parseTokenArgs(['--help'], {})).toEqual({ help: true });
    expect(parseTokenArgs(['--role', 'nobody', '--help'], {})).toEqual({ help: true });
  });

  it('refuses a bad user, role or project, a project for an admin, and none for a project role', () => {
    expect(refusal(['--user', ' ann', '--role', 'admin'])).toMatch(/^--user must be/);
    expect(refusal(['--user', 'ann', '--role', 'boss'])).toBe('--role must be admin or one of owner, manager, reviewer, annotator');
    expect(refusal(['--user', 'ann', '--role', 'admin', '--project', P])).toBe('--role admin is platform-wide: leave out --project');
    expect(refusal(['--user', 'ann', '--role', 'annotator'])).toBe('--role annotator is held in a project: add --project <project uuid>');
    expect(refusal(['--user', 'ann', '--role', 'annotator', '--project', 'p1'])).toBe('--project must be a project UUID');
    expect(refusal(['--user', 'ann', '--role', 'admin', 'extra'])).toMatch(/^Unexpected argument 'extra'/);
  });
});
