import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { repoRoot } from '@labelflow/testing';
import { describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { SHUTDOWN_TIMEOUT_MS } from './lifecycle';

// A clean shutdown under Docker needs two things no process test can see: SIGTERM must reach node
// (not a shell that ignores it as PID 1), and Docker must wait longer than the service's own budget
// before its SIGKILL.

const APP_SERVICES = ['task-svc', 'label-svc', 'qa-svc', 'billing-svc', 'saga-monitor'] as const;

/** The last CMD of a Dockerfile, as the argv Docker runs (exec form) or the shell line (shell form). */
function lastCmd(dockerfile: string): { form: 'exec'; argv: string[] } | { form: 'shell'; line: string } {
  const cmds = dockerfile.split('\n').filter((line) => /^CMD\s/.test(line));
  const last = cmds.at(-1);
  if (!last) throw new Error('the Dockerfile has no CMD');
  const rest = last.replace(/^CMD\s+/, '').trim();
  return rest.startsWith('[') ? { form: 'exec', argv: JSON.parse(rest) as string[] } : { form: 'shell', line: rest };
}

/** True when the command leaves node as the process Docker signals. */
function nodeReceivesSignals(cmd: ReturnType<typeof lastCmd>): boolean {
  if (cmd.form === 'shell') return /^exec\s+node\b/.test(cmd.line);
  const [program, ...args] = cmd.argv;
  if (program === 'node' || program?.endsWith('/node')) return true;
  const isShell = program === 'sh' || program === 'bash' || program === '/bin/sh' || program === '/bin/bash';
  return isShell && args[0] === '-c' && /^exec\s+node\b/.test(args[1] ?? '');
}

/** A compose duration ("20s", "1m30s", "1500ms") in milliseconds. */
function durationMs(text: string): number {
  const units: Record<string, number> = { h: 3_600_000, m: 60_000, s: 1_000, ms: 1, us: 0.001 };
  const parts = [...text.matchAll(/(\d+(?:\.\d+)?)(ms|us|h|m|s)/g)];
  if (parts.length === 0 || parts.map((p) => p[0]).join('') !== text) throw new Error(`not a compose duration: ${text}`);
  return parts.reduce((sum, [, n, unit]) => sum + Number(n) * (units[unit as string] ?? Number.NaN), 0);
}

describe('a service container shuts down cleanly', () => {
  it('runs node so that it receives the SIGTERM docker stop sends', () => {
    const cmd = lastCmd(readFileSync(join(repoRoot, 'infra/Dockerfile'), 'utf8'));
    expect(nodeReceivesSignals(cmd), JSON.stringify(cmd)).toBe(true);
  });

  it('gives every service longer to stop than its own shutdown budget', () => {
    const compose = parse(readFileSync(join(repoRoot, 'infra/docker-compose.yml'), 'utf8'), { merge: true, maxAliasCount: -1 }) as {
      services: Record<string, { stop_grace_period?: string }>;
    };
    for (const name of APP_SERVICES) {
      const grace = compose.services[name]?.stop_grace_period;
      expect(grace, `${name} has no stop_grace_period (Docker's default is 10 s)`).toBeDefined();
      expect(durationMs(grace as string), `${name}'s stop_grace_period ${grace}`).toBeGreaterThan(SHUTDOWN_TIMEOUT_MS);
    }
  });

  it('tells a shell that hands over to node from one that keeps node as its child', () => {
    expect(nodeReceivesSignals({ form: 'exec', argv: ['sh', '-c', 'node dist/apps/$SERVICE/main.js'] })).toBe(false);
    expect(nodeReceivesSignals({ form: 'exec', argv: ['sh', '-c', 'exec node dist/apps/$SERVICE/main.js'] })).toBe(true);
    expect(nodeReceivesSignals({ form: 'exec', argv: ['node', 'dist/apps/task-svc/main.js'] })).toBe(true);
    expect(nodeReceivesSignals({ form: 'shell', line: 'node dist/apps/task-svc/main.js' })).toBe(false);
    expect(durationMs('1m30s')).toBe(90_000);
    expect(() => durationMs('20 seconds')).toThrow('not a compose duration');
  });
});
