import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it, onTestFailed } from 'vitest';
import { repoRoot } from '@labelflow/testing';

/** What the chaos CLI writes with --json-out (tools/chaos/src/report.ts ChaosResult + verdict), as far as this test reads it. */
interface ChaosJson {
  readonly faults: readonly { readonly kind: string; readonly service?: string; readonly error?: string; readonly recovered: boolean }[];
  readonly production?: { readonly unexpected: readonly unknown[]; readonly byOutcome: Readonly<Record<string, number>> };
  readonly audit?: { readonly violations: readonly unknown[] };
  readonly lost?: { readonly lost: number; readonly outboxRows: number };
  readonly findings: readonly unknown[];
  readonly verdict: { readonly pass: boolean; readonly exitCode: number; readonly reasons: readonly string[] };
}

/**
 * The short chaos run (tools/chaos) on every CI run: a few hundred tasks of every scenario with 30 %
 * duplicate deliveries against a stack of its own (private Kafka, PostgreSQL and Redis: the test
 * infrastructure of the other tests is never touched), while one fault of each kind hits it. It runs
 * the CLI, as an operator would, and reads its JSON result.
 */
describe('chaos: the mixed load under one fault of each kind', () => {
  const dir = mkdtempSync(join(tmpdir(), 'lf-chaos-e2e-'));
  let child: ChildProcess | undefined;
  // A failed run keeps its services' and Kafka's logs for whoever looks into it.
  let keep = false;
  afterAll(async () => {
    // A test that timed out leaves the run going: SIGTERM makes it remove everything it started.
    if (child && child.exitCode === null && child.signalCode === null) {
      const gone = new Promise((r) => child?.once('exit', r));
      child.kill('SIGTERM');
      const timer = setTimeout(() => child?.kill('SIGKILL'), 90_000);
      await gone;
      clearTimeout(timer);
    }
    if (keep) console.error(`chaos run failed: its logs are kept in ${join(dir, 'logs')}`);
    else rmSync(dir, { recursive: true, force: true });
  }, 120_000);

  it('ends with zero audit violations, zero unexpected outcomes and zero lost events, no service dying by itself', async () => {
    onTestFailed(() => {
      keep = true;
    });
    const out = join(dir, 'result.json');
    const args = [
      ...['--tasks', '240', '--duplicates', '0.3', '--seed', '7', '--concurrency', '32'],
      // One fault of each kind, the outage and the pause shortened (the pause still outlasts the 6 s session timeout).
      ...['--kills-per-service', '1', '--pg-drops', '1', '--redis-outage-s', '5', '--pause-s', '8', '--qa-sla-ms', '10000'],
      ...['--quiesce-s', '60', '--recovery-s', '45', '--max-minutes', '3.5', '--fault-window', '0.03-0.6'],
      ...['--log-dir', join(dir, 'logs'), '--json-out', out, '--no-build'],
    ];
    let output = '';
    const code = await new Promise<number | null>((resolve, reject) => {
      // The global setup has just built the service bundles (--no-build).
      child = spawn(process.execPath, [join(repoRoot, 'node_modules/tsx/dist/cli.mjs'), 'tools/chaos/src/cli.ts', ...args], { cwd: repoRoot, stdio: ['ignore', 'pipe', 'pipe'] });
      child.stdout?.on('data', (c: Buffer) => (output += c.toString()));
      child.stderr?.on('data', (c: Buffer) => (output += c.toString()));
      child.once('error', reject);
      child.once('exit', (c) => resolve(c));
    });
    const tail = output.slice(-12_000);
    const result = JSON.parse(readFileSync(out, 'utf8')) as ChaosJson;

    for (const kind of ['kill', 'pg-drop', 'pg-restart', 'kafka-restart', 'redis-outage', 'pause']) {
      expect(result.faults.filter((f) => f.kind === kind && !f.error).length, `${kind} injected\n${tail}`).toBeGreaterThanOrEqual(1);
    }
    for (const service of ['task-svc', 'label-svc', 'qa-svc', 'billing-svc']) {
      expect(result.faults.some((f) => f.kind === 'kill' && f.service === service), `${service} killed\n${tail}`).toBe(true);
    }
    expect(result.production?.unexpected, tail).toEqual([]);
    expect(result.audit?.violations, tail).toEqual([]);
    expect(result.lost?.lost, tail).toBe(0);
    expect(result.lost?.outboxRows, tail).toBeGreaterThan(1_000);
    expect(result.findings, tail).toEqual([]);
    expect(result.verdict.reasons, tail).toEqual([]);
    expect(code, tail).toBe(0);
  }, 240_000);
});
