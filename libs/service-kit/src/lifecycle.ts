import type { Logger } from '@labelflow/telemetry';

export interface Closeable {
  readonly name: string;
  close(): Promise<void>;
}

/** Resources close in reverse order of opening: consumers before producers before pools. */
export class Lifecycle {
  private readonly resources: Closeable[] = [];
  private closing: Promise<void> | undefined;

  constructor(private readonly logger: Logger) {}

  add<T extends Closeable>(resource: T): T {
    this.resources.push(resource);
    return resource;
  }

  onClose(name: string, close: () => Promise<void>): void {
    this.add({ name, close });
  }

  close(): Promise<void> {
    this.closing ??= (async () => {
      for (const resource of [...this.resources].reverse()) {
        try {
          await resource.close();
        } catch (error) {
          this.logger.warn({ err: error, resource: resource.name }, 'error while closing');
        }
      }
    })();
    return this.closing;
  }
}

/** Starts a service and closes it cleanly on SIGINT/SIGTERM; a failed start exits with code 1. */
export async function runUntilSignal(logger: Logger, start: () => Promise<Lifecycle>): Promise<void> {
  let lifecycle: Lifecycle;
  try {
    lifecycle = await start();
  } catch (error) {
    // A bad configuration is the operator's to fix: say what is wrong, without a stack trace.
    const { code, details } = error as { code?: string; details?: unknown };
    if (code === 'CONFIG_INVALID') logger.fatal({ code, details }, (error as Error).message);
    else logger.fatal({ err: error }, (error as Error).message);
    process.exit(1);
  }
  const stop = (signal: string) => {
    logger.info({ signal }, 'shutting down');
    const force = setTimeout(() => process.exit(1), 15_000);
    force.unref();
    void lifecycle.close().then(() => process.exit(0));
  };
  process.once('SIGINT', () => stop('SIGINT'));
  process.once('SIGTERM', () => stop('SIGTERM'));
}
