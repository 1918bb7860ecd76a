import type { Logger } from '@labelflow/telemetry';

export interface Closeable {
  readonly name: string;
  close(): Promise<void>;
}

/** How long a whole shutdown may take before the process exits anyway (code 1). */
export const SHUTDOWN_TIMEOUT_MS = 15_000;
/**
 * How long one resource may take to close before the next one is closed regardless. A close that
 * hangs on an unreachable dependency (kafkajs waiting out a fetch, a send retrying against a dead
 * broker) must not use up the whole budget and leave the relay, the pool and the rest unclosed.
 */
export const CLOSE_STEP_TIMEOUT_MS = 5_000;

export interface LifecycleOptions {
  /** Per-resource close budget; default CLOSE_STEP_TIMEOUT_MS. */
  readonly stepTimeoutMs?: number;
}

/** What a close left behind: the resources that failed or ran out of time (empty when all closed). */
export interface CloseReport {
  readonly unclosed: readonly { readonly name: string; readonly reason: 'failed' | 'timed out' }[];
}

/** Resources close in reverse order of opening: consumers before producers before pools. */
export class Lifecycle {
  private readonly resources: Closeable[] = [];
  private closing: Promise<CloseReport> | undefined;
  private readonly stepTimeoutMs: number;

  constructor(
    private readonly logger: Logger,
    options: LifecycleOptions = {},
  ) {
    this.stepTimeoutMs = options.stepTimeoutMs ?? CLOSE_STEP_TIMEOUT_MS;
  }

  add<T extends Closeable>(resource: T): T {
    this.resources.push(resource);
    return resource;
  }

  onClose(name: string, close: () => Promise<void>): void {
    this.add({ name, close });
  }

  /** Closes everything once; later calls get the same report. Never rejects. */
  close(): Promise<CloseReport> {
    this.closing ??= (async () => {
      const unclosed: { name: string; reason: 'failed' | 'timed out' }[] = [];
      for (const resource of [...this.resources].reverse()) {
        const outcome = await this.closeOne(resource);
        if (outcome !== 'closed') unclosed.push({ name: resource.name, reason: outcome });
      }
      return { unclosed };
    })();
    return this.closing;
  }

  private async closeOne(resource: Closeable): Promise<'closed' | 'failed' | 'timed out'> {
    let timer: NodeJS.Timeout | undefined;
    const timedOut = new Promise<'timed out'>((resolve) => {
      timer = setTimeout(() => resolve('timed out'), this.stepTimeoutMs);
      timer.unref();
    });
    const closed = Promise.resolve()
      .then(() => resource.close())
      .then(
        () => 'closed' as const,
        (error: unknown) => {
          this.logger.warn({ err: error, resource: resource.name }, 'error while closing');
          return 'failed' as const;
        },
      );
    const outcome = await Promise.race([closed, timedOut]);
    clearTimeout(timer);
    if (outcome === 'timed out') {
      this.logger.warn({ resource: resource.name, timeoutMs: this.stepTimeoutMs }, 'close timed out; closing the rest regardless');
    }
    return outcome;
  }
}

export interface SignalSource {
  on(signal: 'SIGINT' | 'SIGTERM', listener: () => void): unknown;
  removeListener(signal: 'SIGINT' | 'SIGTERM', listener: () => void): unknown;
}

export interface RunOptions {
  /** The whole shutdown's budget; default SHUTDOWN_TIMEOUT_MS. */
  readonly shutdownTimeoutMs?: number;
  /** Ends the process; replaced in tests. Default process.exit. */
  readonly exit?: (code: number) => void;
  /** Where SIGINT/SIGTERM come from; replaced in tests. Default process. */
  readonly signals?: SignalSource;
}

/**
 * Starts a service and closes it cleanly on SIGINT/SIGTERM; a failed start exits with code 1.
 * The signal handlers are installed before the start: a SIGTERM during a slow start (topics not yet
 * served, a group join) closes what the start opened as soon as it returns, instead of killing the
 * process mid-way. Exit code 0 only when every resource closed in time.
 */
export async function runUntilSignal(logger: Logger, start: () => Promise<Lifecycle>, options: RunOptions = {}): Promise<void> {
  const exit = options.exit ?? ((code: number) => process.exit(code));
  const signals = options.signals ?? process;
  const budget = options.shutdownTimeoutMs ?? SHUTDOWN_TIMEOUT_MS;
  let lifecycle: Lifecycle | undefined;
  let stopping: string | undefined;
  let force: NodeJS.Timeout | undefined;

  const shutDown = async (current: Lifecycle) => {
    const report = await current.close();
    // Done within the budget: an injected `exit` that returns must not hear "took too long" later.
    clearTimeout(force);
    if (report.unclosed.length > 0) {
      logger.error({ unclosed: report.unclosed }, 'shut down with resources left unclosed');
      exit(1);
      return;
    }
    exit(0);
  };
  const stop = (signal: string) => {
    // Listened for until exit: with a one-time listener, a second SIGTERM would get Node's default
    // action and kill the process mid-close without a word. `npm start`'s Ctrl-C sends two (the
    // terminal's SIGINT, then the script's SIGTERM), so a repeat is not an order to hurry: the
    // close goes on, bounded by the budget.
    if (stopping) {
      logger.info({ signal, shuttingDownSince: stopping, budgetMs: budget }, 'already shutting down; the close goes on within its budget');
      return;
    }
    stopping = signal;
    logger.info({ signal, starting: lifecycle === undefined }, 'shutting down');
    force = setTimeout(() => {
      logger.fatal({ signal, timeoutMs: budget }, 'shutdown took too long; exiting');
      exit(1);
    }, budget);
    force.unref();
    if (lifecycle) void shutDown(lifecycle);
  };
  const onSigint = () => stop('SIGINT');
  const onSigterm = () => stop('SIGTERM');
  signals.on('SIGINT', onSigint);
  signals.on('SIGTERM', onSigterm);

  try {
    lifecycle = await start();
  } catch (error) {
    signals.removeListener('SIGINT', onSigint);
    signals.removeListener('SIGTERM', onSigterm);
    // A signal during the start armed the force timer; this exit is the one that counts.
    clearTimeout(force);
    // A bad configuration is the operator's to fix: say what is wrong, without a stack trace.
    const { code, details } = error as { code?: string; details?: unknown };
    if (code === 'CONFIG_INVALID') logger.fatal({ code, details }, (error as Error).message);
    else logger.fatal({ err: error }, (error as Error).message);
    exit(1);
    return;
  }
  if (stopping) await shutDown(lifecycle);
}
