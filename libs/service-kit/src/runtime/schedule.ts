import type { Logger } from '@labelflow/telemetry';
import type { Lifecycle } from '../lifecycle';

/**
 * Runs `job` now and every `everyMs` until the service closes; a failed run is logged, not fatal.
 * A run still going when the next is due is not doubled: that turn is skipped. The close aborts
 * `signal` and waits for the run under way, so no job still holds a connection, or queries a pool
 * that has ended, when the pool closes after it: jobs that loop stop between rounds.
 */
export function schedule(lifecycle: Lifecycle, name: string, everyMs: number, job: (signal: AbortSignal) => Promise<void>, logger: Logger): void {
  const stop = new AbortController();
  let current: Promise<void> | undefined;
  const run = () => {
    if (current || stop.signal.aborted) return;
    current = job(stop.signal)
      .catch((error: Error) => {
        if (!stop.signal.aborted) logger.warn({ err: error, job: name }, 'scheduled job failed');
      })
      .finally(() => (current = undefined));
  };
  run();
  const timer = setInterval(run, everyMs);
  timer.unref();
  lifecycle.onClose(name, async () => {
    clearInterval(timer);
    stop.abort();
    await current;
  });
}
