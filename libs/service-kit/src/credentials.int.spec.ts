import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { Redis } from 'ioredis';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { repoRoot, sparePort, startPrivatePostgres, type PrivateServer } from '@labelflow/testing';
import { ensureDatabase } from './db';

const run = promisify(execFile);
const compose = parse(readFileSync(join(repoRoot, 'infra/docker-compose.yml'), 'utf8'), { merge: true }) as {
  services: Record<string, { command?: string[] }>;
};

/** The ACL file compose's redis writes, with `password`: the printf format of its command. */
function composeAclFile(password: string): string {
  const script = (compose.services.redis?.command ?? []).join(' ');
  const format = /printf '([^']*)'/.exec(script)?.[1];
  if (!format || !format.includes('%s')) throw new Error(`no printf of an ACL file in the compose redis command:\n${script}`);
  return format.replace('%s', password).replace(/\\n/g, '\n');
}

/** A message of a rejected promise, or a failure when it resolved. */
const refusal = (promise: Promise<unknown>): Promise<string> =>
  promise.then(
    (value) => {
      throw new Error(`expected a refusal, got ${JSON.stringify(value)}`);
    },
    (error: Error) => error.message,
  );

describe('Redis with the compose ACL (user labelflow, default user off)', () => {
  const password = randomBytes(24).toString('hex');
  const dir = mkdtempSync(join(tmpdir(), 'lf-redis-acl-'));
  let server: ChildProcess | undefined;
  let port = 0;
  const clients: Redis[] = [];
  /** An ioredis client set up as the services set theirs up (no reconnects here). */
  const connect = (url: string) => {
    const redis = new Redis(url, { lazyConnect: true, maxRetriesPerRequest: 0, enableOfflineQueue: false, retryStrategy: () => null });
    redis.on('error', () => undefined);
    clients.push(redis);
    return redis;
  };
  /** Connects and returns what the server answered: ioredis emits the reply as an 'error' and closes. */
  const refusedConnect = async (url: string): Promise<string> => {
    const redis = connect(url);
    const errors: string[] = [];
    redis.on('error', (error: Error) => errors.push(error.message));
    const message = await refusal(redis.connect());
    return [message, ...errors].join(' | ');
  };

  beforeAll(async () => {
    port = await sparePort();
    const acl = join(dir, 'users.acl');
    writeFileSync(acl, composeAclFile(password), { mode: 0o600 });
    // The password is in the ACL file only, never on the command line, as in compose.
    server = spawn('redis-server', ['--bind', '127.0.0.1', '--port', String(port), '--aclfile', acl, '--save', '', '--appendonly', 'no', '--dir', dir], { stdio: 'ignore' });
    const deadline = Date.now() + 20_000;
    for (;;) {
      const probe = connect(`redis://labelflow:${password}@127.0.0.1:${port}`);
      try {
        await probe.connect();
        if ((await probe.ping()) === 'PONG') return;
      } catch (error) {
        if (Date.now() > deadline) throw new Error(`redis-server on ${port} did not answer: ${(error as Error).message}`);
      } finally {
        probe.disconnect();
      }
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  });

  afterAll(async () => {
    for (const c of clients) c.disconnect();
    if (server && server.exitCode === null) {
      const gone = new Promise((resolve) => server?.once('exit', resolve));
      server.kill('SIGTERM');
      await gone;
    }
    rmSync(dir, { recursive: true, force: true });
  });

  it('serves the commands the services use to ioredis with the credentials in the URL', async () => {
    const redis = connect(`redis://labelflow:${password}@127.0.0.1:${port}`);
    await redis.connect();
    expect(await redis.acl('WHOAMI')).toBe('labelflow');
    await redis.set('k', 'v', 'PX', 10_000);
    expect(await redis.get('k')).toBe('v');
    const sha = (await redis.script('LOAD', "return redis.call('GET', KEYS[1])")) as string;
    expect(await redis.evalsha(sha, 1, 'k')).toBe('v');
    expect((await redis.scan('0', 'MATCH', 'k*'))[1]).toContain('k');
    expect(await redis.info('server')).toMatch(/redis_version/);
    expect(await redis.del('k')).toBe(1);
  });

  it('refuses a client without credentials (the default user is off)', async () => {
    expect(await refusedConnect(`redis://127.0.0.1:${port}`)).toMatch(/NOAUTH|NOPERM/);
  });

  it('refuses a wrong password and a login as the default user', async () => {
    expect(await refusedConnect(`redis://labelflow:${password}-wrong@127.0.0.1:${port}`)).toMatch(/WRONGPASS/);
    expect(await refusedConnect(`redis://default:${password}@127.0.0.1:${port}`)).toMatch(/WRONGPASS/);
  });

  it('denies the services user the dangerous commands', async () => {
    const redis = connect(`redis://labelflow:${password}@127.0.0.1:${port}`);
    await redis.connect();
    expect(await refusal(redis.flushall())).toMatch(/NOPERM/);
    expect(await refusal(redis.config('GET', 'requirepass'))).toMatch(/NOPERM/);
  });
});

/**
 * PostgreSQL set up as compose sets it up: infra/postgres-init/01-databases.sql and
 * 02-app-role.sh, then every pg_hba rule scram-sha-256. A private server on a spare port.
 */
describe('PostgreSQL with scram-sha-256 and the services role of infra/postgres-init', () => {
  const superPassword = randomBytes(24).toString('hex');
  const appPassword = randomBytes(24).toString('hex');
  let server: PrivateServer | undefined;
  let dir = '';
  const url = (user: string, password: string | undefined, db: string) =>
    `postgres://${user}${password === undefined ? '' : `:${password}`}@127.0.0.1:${server?.port}/${db}`;
  const psql = (args: string[], env: Record<string, string> = {}) =>
    run('psql', ['-v', 'ON_ERROR_STOP=1', '-X', '-q', '-h', dir, '-p', String(server?.port), '-U', 'postgres', ...args], { env: { ...process.env, ...env } });

  beforeAll(async () => {
    server = await startPrivatePostgres();
    // The private server keeps its socket in its own dir: the one whose data holds pg_hba.conf.
    const { stdout } = await run('psql', ['-X', '-At', '-h', '127.0.0.1', '-p', String(server.port), '-U', 'postgres', '-d', 'postgres', '-c', 'SHOW hba_file']);
    const hba = stdout.trim();
    dir = join(hba, '..', '..');
    await psql(['-d', 'postgres', '-f', join(repoRoot, 'infra/postgres-init/01-databases.sql')]);
    await run('bash', [join(repoRoot, 'infra/postgres-init/02-app-role.sh')], {
      env: { ...process.env, POSTGRES_USER: 'postgres', POSTGRES_APP_PASSWORD: appPassword, LABELFLOW_DB_USER: 'labelflow', LABELFLOW_INIT_PGHOST: dir, PGPORT: String(server.port) },
    });
    await psql(['-d', 'postgres', '-c', `ALTER ROLE postgres PASSWORD '${superPassword}'`]);
    // What the image does with POSTGRES_INITDB_ARGS/POSTGRES_HOST_AUTH_METHOD=scram-sha-256.
    writeFileSync(hba, 'local all all scram-sha-256\nhost all all 127.0.0.1/32 scram-sha-256\nhost all all ::1/128 scram-sha-256\n');
    await run('psql', ['-X', '-q', '-h', '127.0.0.1', '-p', String(server.port), '-U', 'postgres', '-d', 'postgres', '-c', 'SELECT pg_reload_conf()'], {
      env: { ...process.env, PGPASSWORD: superPassword },
    });
  });

  afterAll(async () => {
    await server?.destroy();
  });

  it('lets the services role create its database and tables with the password', async () => {
    await ensureDatabase(url('labelflow', appPassword, 'task_svc'));
    await ensureDatabase(url('labelflow', appPassword, 'new_svc'));
    for (const db of ['task_svc', 'new_svc']) {
      const client = new pg.Client(url('labelflow', appPassword, db));
      await client.connect();
      try {
        await client.query('CREATE TABLE probe (id int PRIMARY KEY)');
        const { rows } = await client.query<{ user: string; superuser: string }>("SELECT current_user AS user, current_setting('is_superuser') AS superuser");
        expect(rows[0]).toEqual({ user: 'labelflow', superuser: 'off' });
      } finally {
        await client.end();
      }
    }
  });

  it('refuses the services role with a wrong password or none', async () => {
    for (const password of [`${appPassword}x`, undefined]) {
      const client = new pg.Client(url('labelflow', password, 'task_svc'));
      client.on('error', () => undefined);
      const message = await refusal(client.connect());
      expect(message).toMatch(/password authentication failed|client password must be a string|SASL/);
      await client.end().catch(() => undefined);
    }
  });

  it('stores the passwords as SCRAM-SHA-256 verifiers', async () => {
    const client = new pg.Client(url('postgres', superPassword, 'postgres'));
    await client.connect();
    try {
      const { rows } = await client.query<{ rolname: string; scram: boolean }>(
        "SELECT rolname, rolpassword LIKE 'SCRAM-SHA-256$%' AS scram FROM pg_authid WHERE rolname IN ('postgres', 'labelflow') ORDER BY rolname",
      );
      expect(rows).toEqual([
        { rolname: 'labelflow', scram: true },
        { rolname: 'postgres', scram: true },
      ]);
    } finally {
      await client.end();
    }
  });
});
