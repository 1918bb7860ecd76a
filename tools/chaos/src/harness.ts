import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { repoRoot } from '@labelflow/testing';
import { serviceOrder } from './schedule';

/** Waits `ms`, or less once `signal` aborts. */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal?.aborted) {
      resolve();
      return;
    }
    const done = () => {
      clearTimeout(timer);
      signal?.removeEventListener('abort', done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    signal?.addEventListener('abort', done, { once: true });
  });
}

/** The run was cut short (Ctrl-C, the time bound): not a failure of the services. */
export class Aborted extends Error {}

/** Rejects as soon as `signal` aborts; for racing work that cannot be cancelled itself. */
export const abortion = (signal?: AbortSignal) =>
  new Promise<never>((_, reject) => {
    if (!signal) return;
    const fail = () => reject(new Aborted(String(signal.reason ?? 'aborted')));
    if (signal.aborted) fail();
    else signal.addEventListener('abort', fail, { once: true });
  });

/** `work`, or an error naming `what` once `ms` have passed; the work itself goes on. */
export async function within<T>(ms: number, what: string, work: Promise<T>): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error(`${what} took longer than ${Math.round(ms / 1000)} s`)), ms)));
  try {
    return await Promise.race([work, timeout]);
  } finally {
    clearTimeout(timer);
  }
}

/** A short hash of each service's bundle on disk: a restart after a rebuild runs other code, which the report notes. */
export const bundleHashes = (): Record<string, string> =>
  Object.fromEntries(
    serviceOrder.map((s) => {
      try {
        return [s, createHash('sha256').update(readFileSync(join(repoRoot, `dist/apps/${s}/main.js`))).digest('hex').slice(0, 12)];
      } catch {
        return [s, 'missing'];
      }
    }),
  );

/** Time accumulated while running: `set(true)` starts it, `set(false)` stops it; a repeated `set` changes nothing. */
export function stopwatch(now: () => number = Date.now): { set(running: boolean): void; elapsedMs(): number } {
  let total = 0;
  let since: number | undefined;
  return {
    set(running) {
      if (running && since === undefined) since = now();
      if (!running && since !== undefined) {
        total += now() - since;
        since = undefined;
      }
    },
    elapsedMs: () => total + (since === undefined ? 0 : now() - since),
  };
}
