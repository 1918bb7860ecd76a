// npm run token -- --user U --role R [--project P]
// Prints a bearer token signed with the local development key (created on first use), the token
// alone on the last line of stdout. `--role admin` is a platform admin (no project); any other role
// is held in the one project named by --project.
import { parseArgs } from 'node:util';
import { ActorName, ProjectId } from '@labelflow/contracts';
import { DEV_AUDIENCE, DEV_ISSUER, devKeyFile, issueToken, loadOrCreateDevKey, ProjectRole } from '@labelflow/auth';

const USAGE = 'usage: npm run token -- --user <name> --role <admin|owner|manager|reviewer|annotator> [--project <project uuid>]';
/** Long enough for a working day of trying things out; production tokens come from the identity provider. */
const TTL_S = 12 * 3600;

function fail(message: string): never {
  process.stderr.write(`${message}\n${USAGE}\n`);
  process.exit(2);
}

async function main(): Promise<void> {
  let values: { user?: string; role?: string; project?: string };
  try {
    ({ values } = parseArgs({ options: { user: { type: 'string' }, role: { type: 'string' }, project: { type: 'string' } }, strict: true, allowPositionals: false }));
  } catch (error) {
    fail((error as Error).message);
  }
  const user = ActorName.safeParse(values.user);
  if (!user.success) fail('--user must be 1-128 characters of letters, digits, . _ @ - (starting with a letter or digit)');
  const roles = Object.values(ProjectRole) as string[];
  if (values.role !== 'admin' && !roles.includes(values.role ?? '')) fail(`--role must be admin or one of ${roles.join(', ')}`);
  if (values.role === 'admin' && values.project !== undefined) fail('--role admin is platform-wide: leave out --project');
  if (values.role !== 'admin' && values.project === undefined) fail(`--role ${values.role} is held in a project: add --project <project uuid>`);
  const project = values.project === undefined ? undefined : ProjectId.safeParse(values.project);
  if (project && !project.success) fail('--project must be a project UUID');
  const file = devKeyFile();
  const { privateJwk } = await loadOrCreateDevKey(file);
  const token = await issueToken(
    { jwk: privateJwk },
    {
      issuer: DEV_ISSUER,
      audience: DEV_AUDIENCE,
      subject: user.data,
      ttlS: TTL_S,
      ...(values.role === 'admin' ? { admin: true } : { projects: { [project!.data!]: values.role as ProjectRole } }),
    },
  );
  process.stderr.write(`# ${user.data} as ${values.role}${project ? ` in ${project.data}` : ''}, valid ${TTL_S / 3600} h, signed with ${file}\n`);
  process.stdout.write(`${token}\n`);
}

void main().catch((error: Error) => fail(error.message));
