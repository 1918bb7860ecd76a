// `npm run token` options, read apart from the CLI so that a unit test can pin every refusal and
// every default down.
import { parseArgs } from 'node:util';
import { ActorName, ProjectId } from '@labelflow/contracts';
import { DEV_AUDIENCE, DEV_ISSUER, devKeyFile, ProjectRole } from '@labelflow/auth';

export const tokenUsage = `usage: npm run token -- --user <name> --role <admin|owner|manager|reviewer|annotator> [--project <project uuid>]
Signs with the local development key ($LABELFLOW_SIGNING_KEY_FILE, else .local/auth/dev-signing-key.json),
for the issuer and audience the services verify: $AUTH_ISSUER (default ${DEV_ISSUER}) and $AUTH_AUDIENCE (default ${DEV_AUDIENCE}).`;

/** A command line the token tool refuses: printed with the usage, exit code 2. */
export class TokenUsageError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'TokenUsageError';
  }
}

export interface TokenOptions {
  readonly user: string;
  /** A platform admin (no project), or a role held in `project`. */
  readonly grant: { readonly admin: true } | { readonly project: string; readonly role: ProjectRole };
  readonly keyFile: string;
  readonly issuer: string;
  readonly audience: string;
}

/**
 * Parses `argv` (the arguments after `--`) against `env`. The issuer and audience are the ones
 * scripts/start.sh and infra/docker-compose.yml give the services (`AUTH_ISSUER`, `AUTH_AUDIENCE`,
 * the development identity's when unset or empty): a token for any other would be refused with 401.
 */
export function parseTokenArgs(argv: readonly string[], env: Readonly<Record<string, string | undefined>>): { readonly help: true } | { readonly help: false; readonly options: TokenOptions } {
  let values;
  try {
    ({ values } = parseArgs({ args: [...argv], options: { user: { type: 'string' }, role: { type: 'string' }, project: { type: 'string' }, help: { type: 'boolean' } }, strict: true, allowPositionals: false }));
  } catch (error) {
    throw new TokenUsageError((error as Error).message.split('\n')[0] ?? 'bad arguments');
  }
  if (values.help) return { help: true };
  const user = ActorName.safeParse(values.user);
  if (!user.success) throw new TokenUsageError('--user must be 1-128 characters of letters, digits, . _ @ - (starting with a letter or digit)');
  const roles: readonly string[] = Object.values(ProjectRole);
  const role = values.role;
  if (role !== 'admin' && !roles.includes(role ?? '')) throw new TokenUsageError(`--role must be admin or one of ${roles.join(', ')}`);
  let grant: TokenOptions['grant'];
  if (role === 'admin') {
    if (values.project !== undefined) throw new TokenUsageError('--role admin is platform-wide: leave out --project');
    grant = { admin: true };
  } else {
    if (values.project === undefined) throw new TokenUsageError(`--role ${role} is held in a project: add --project <project uuid>`);
    const project = ProjectId.safeParse(values.project);
    if (!project.success) throw new TokenUsageError('--project must be a project UUID');
    grant = { project: project.data, role: role as ProjectRole };
  }
  // An empty variable means "not set", as for the services and the producer.
  return { help: false, options: { user: user.data, grant, keyFile: devKeyFile(env), issuer: env.AUTH_ISSUER || DEV_ISSUER, audience: env.AUTH_AUDIENCE || DEV_AUDIENCE } };
}
