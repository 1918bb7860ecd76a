import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';

const repoRoot = fileURLToPath(new URL('../../../', import.meta.url));

/** Runs one of this folder's scripts in a child Node process (TypeScript via tsx); resolves with its stdout. */
export function runTsxScript(script: string, args: readonly string[], { timeoutMs = 60_000 } = {}): Promise<string> {
  const file = fileURLToPath(new URL(script, import.meta.url));
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ['--import', 'tsx', file, ...args], { cwd: repoRoot, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    child.stdout.on('data', (c: Buffer) => (out += c.toString()));
    child.stderr.on('data', (c: Buffer) => (err += c.toString()));
    const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
    child.once('error', reject);
    child.once('exit', (code, signal) => {
      clearTimeout(timer);
      if (code === 0) resolve(out);
      else reject(new Error(`${script} exited (code ${code}, signal ${signal}):\n${err.slice(-4000)}`));
    });
  });
}
