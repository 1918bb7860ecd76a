// npm run token -- --user U --role R [--project P]
// Prints a bearer token signed with the local development key (created on first use), the token
// alone on the last line of stdout. `--role admin` is a platform admin (no project); any other role
// is held in the one project named by --project. Issuer and audience: AUTH_ISSUER and AUTH_AUDIENCE,
// as the services verify them.
import { issueToken, loadOrCreateDevKey } from '@labelflow/auth';
import { parseTokenArgs, TokenUsageError, tokenUsage, type TokenOptions } from './options';

/** Long enough for a working day of trying things out; production tokens come from the identity provider. */
const TTL_S = 12 * 3600;

function fail(message: string): never {
  process.stderr.write(`${message}\n${tokenUsage}\n`);
  process.exit(2);
}

function readArgs(): TokenOptions {
  try {
    const parsed = parseTokenArgs(process.argv.slice(2), process.env);
    if (!parsed.help) return parsed.options;
    process.stdout.write(`${tokenUsage}\n`);
    process.exit(0);
  } catch (error) {
    if (error instanceof TokenUsageError) fail(error.message);
    throw error;
  }
}

async function main(): Promise<void> {
  const o = readArgs();
  const { privateJwk } = await loadOrCreateDevKey(o.keyFile);
  const token = await issueToken(
    { jwk: privateJwk },
    { issuer: o.issuer, audience: o.audience, subject: o.user, ttlS: TTL_S, ...('admin' in o.grant ? { admin: true } : { projects: { [o.grant.project]: o.grant.role } }) },
  );
  const as = 'admin' in o.grant ? 'admin' : `${o.grant.role} in ${o.grant.project}`;
  process.stderr.write(`# ${o.user} as ${as}, valid ${TTL_S / 3600} h, iss ${o.issuer}, aud ${o.audience}, signed with ${o.keyFile}\n`);
  process.stdout.write(`${token}\n`);
}

void main().catch((error: Error) => fail(error.message));
