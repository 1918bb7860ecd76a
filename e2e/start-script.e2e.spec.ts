import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, inject, it } from 'vitest';
import { dropDatabase, eventually, httpClient, repoRoot, serviceNames, spareBase, uniqueName } from '@labelflow/testing';

/** True while a process with this pid exists (a zombie counts as gone for our purposes: it is reaped by its parent). */
const alive = (pid: number): boolean => {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};

/** The output of a running process, and a way to wait until some of it has appeared. */
function watch(child: ChildProcess) {
  let text = '';
  const waiters: { pattern: RegExp; resolve: (m: RegExpMatchArray) => void }[] = [];
  const onData = (chunk: Buffer) => {
    text += chunk.toString();
    for (const w of [...waiters]) {
      const match = text.match(w.pattern);
      if (match) {
        waiters.splice(waiters.indexOf(w), 1);
        w.resolve(match);
      }
    }
  };
  child.stdout?.on('data', onData);
  child.stderr?.on('data', onData);
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => child.once('exit', (code, signal) => resolve({ code, signal })));
  return {
    exited,
    text: () => text,
    /** Resolves with the first match of `pattern` in the output so far or to come. */
    until(pattern: RegExp, timeoutMs = 90_000): Promise<RegExpMatchArray> {
      const match = text.match(pattern);
      if (match) return Promise.resolve(match);
      return new Promise((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error(`start.sh never printed ${pattern} in ${timeoutMs} ms; its output:\n${text.slice(-6000)}`)), timeoutMs);
        waiters.push({ pattern, resolve: (m) => (clearTimeout(timer), resolve(m)) });
        void exited.then(({ code, signal }) => reject(new Error(`start.sh exited (code ${code}, signal ${signal}) before printing ${pattern}; its output:\n${text.slice(-6000)}`)));
      });
    },
  };
}

describe('npm start (scripts/start.sh)', () => {
  const infra = inject('infra');
  const prefix = uniqueName('lfstart');
  const dbSuffix = `_${prefix}`;
  const logDir = mkdtempSync(join(tmpdir(), 'labelflow-start-'));
  const pids = new Set<number>();
  let script: ChildProcess | undefined;

  afterAll(async () => {
    // Only what this test started: the script, then any service it left behind.
    if (script?.pid && alive(script.pid)) script.kill('SIGKILL');
    for (const pid of pids) if (alive(pid)) process.kill(pid, 'SIGKILL');
    for (const name of [...serviceNames, 'saga-monitor']) await dropDatabase(infra.pgUrl, `${name.replace('-', '_')}${dbSuffix}`).catch(() => undefined);
    rmSync(logDir, { recursive: true, force: true });
  });

  it('restarts a service that died with backoff while the others keep running, and stops every service on SIGINT', async () => {
    // start.sh reinstalls node_modules when the lock file is newer: never under a running test suite.
    expect(statSync(join(repoRoot, 'node_modules/.package-lock.json')).mtimeMs, 'node_modules is older than package-lock.json: run npm ci first').toBeGreaterThanOrEqual(
      statSync(join(repoRoot, 'package-lock.json')).mtimeMs,
    );
    const base = await spareBase(5);
    const port = Object.fromEntries(serviceNames.map((name, i) => [name, base + i])) as Record<(typeof serviceNames)[number], number>;
    const kafka = new URL(`kafka://${infra.kafkaBrokers.split(',')[0]!}`);
    const pg = new URL(infra.pgUrl);
    const redis = new URL(infra.redisUrl);
    script = spawn('bash', ['scripts/start.sh'], {
      cwd: repoRoot,
      env: {
        ...process.env,
        // The infrastructure the tests use, so that start.sh finds it up and leaves it alone.
        KAFKA_PORT: kafka.port,
        PGHOST: pg.hostname,
        PGPORT: pg.port || '5432',
        PGUSER: pg.username || 'postgres',
        REDIS_HOST: redis.hostname,
        REDIS_PORT: redis.port || '6379',
        LABELFLOW_KEEP_INFRA: '1',
        // Everything else of its own: ports, topics and consumer groups, databases, logs.
        LABELFLOW_PORT_BASE: String(base),
        KAFKA_TOPIC_PREFIX: prefix,
        LABELFLOW_DB_SUFFIX: dbSuffix,
        LABELFLOW_LOG_DIR: logDir,
        KAFKA_TOPIC_PARTITIONS: '1',
        // The killed instance's partitions move to its successor after this long (the minimum).
        KAFKA_SESSION_TIMEOUT_MS: '6000',
        LOG_LEVEL: 'info',
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    const out = watch(script);
    await out.until(/labelflow is running/, 150_000);
    const started = Object.fromEntries(
      serviceNames.map((name) => {
        const match = out.text().match(new RegExp(`== ${name} started \\(pid (\\d+)\\), http://127\\.0\\.0\\.1:${port[name]}`));
        expect(match, `start.sh names ${name}'s pid and port`).not.toBeNull();
        return [name, Number(match![1])];
      }),
    ) as Record<(typeof serviceNames)[number], number>;
    Object.values(started).forEach((pid) => pids.add(pid));
    for (const name of serviceNames) expect((await httpClient(`http://127.0.0.1:${port[name]}`, undefined, { serverErrors: 'return' }).get('/readyz')).status, `${name} ready`).toBe(200);

    process.kill(started['label-svc'], 'SIGKILL');
    await out.until(new RegExp(`== label-svc \\(pid ${started['label-svc']}\\) exited unexpectedly with code 137 \\(SIGKILL\\) after \\d+s; the last lines of its log`));
    await out.until(/== restarting label-svc in 1s/);
    const [, restartedPid] = await out.until(/== label-svc restarted \(pid (\d+)\)/);
    const newPid = Number(restartedPid);
    pids.add(newPid);
    expect(newPid).not.toBe(started['label-svc']);
    await eventually(async () => expect((await httpClient(`http://127.0.0.1:${port['label-svc']}`, undefined, { serverErrors: 'return' }).get('/readyz')).status).toBe(200), { timeoutMs: 60_000 });
    expect(alive(newPid)).toBe(true);
    expect(alive(started['label-svc'])).toBe(false);
    // The others never noticed.
    for (const name of ['task-svc', 'qa-svc', 'billing-svc'] as const) {
      expect(alive(started[name]), `${name} still runs as pid ${started[name]}`).toBe(true);
      expect((await httpClient(`http://127.0.0.1:${port[name]}`, undefined, { serverErrors: 'return' }).get('/readyz')).status, `${name} ready`).toBe(200);
    }
    expect(out.text()).not.toMatch(/(task-svc|qa-svc|billing-svc) \(pid \d+\) exited/);

    script.kill('SIGINT');
    const { code } = await out.exited;
    expect(code).toBe(130);
    expect(out.text()).toMatch(/== stopping services/);
    for (const pid of pids) expect(alive(pid), `pid ${pid} stopped`).toBe(false);
    expect(out.text()).not.toMatch(/== stopping (kafka|postgres|redis)/);
  });
});
