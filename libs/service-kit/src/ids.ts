import { createSnowflake, createWorkerLease, type Snowflake, type WorkerLease } from '@labelflow/idgen';
import type { Logger } from '@labelflow/telemetry';
import type { Pool } from './db';
import { ServiceKitError, ServiceKitErrors } from './errors';
import type { RuntimeName } from './runtime/definition';

/** Each service owns a quarter of the 1024 Snowflake worker ids, so ids never collide across services. */
const WORKERS_PER_SERVICE = 256;
// The saga monitor issues no ids (it creates nothing and publishes nothing); it leases a worker id
// only because every process on the runtime does, and shares task-svc's range instead of taking
// one from the services.
const serviceSlot: Readonly<Record<RuntimeName, number>> = { 'task-svc': 0, 'label-svc': 1, 'qa-svc': 2, 'billing-svc': 3, 'saga-monitor': 0 };

export interface IdSource {
  /** A new 64-bit time-ordered id (decimal string), unique across every live process. */
  next(): Promise<string>;
  /** An id now, or undefined when only `next` can answer (it would wait, or it fails). */
  tryNext(): string | undefined;
  readonly workerId: () => number;
  close(): Promise<void>;
}

export interface IdSourceDeps {
  readonly pool: Pool;
  readonly service: RuntimeName;
  readonly logger: Logger;
  /** Lease timing (defaults of @labelflow/idgen: 30 s TTL, renewed every 10 s); tests shorten it. */
  readonly lease?: { readonly ttlMs?: number; readonly renewEveryMs?: number };
}

/**
 * Snowflake ids from a worker id leased in the service's database: no two live processes share
 * one. When the lease is lost (this process stalled past its TTL and another took the id), ids
 * stop at once and a new worker id is leased, retrying with backoff for as long as that fails
 * (database away, every id taken); until then callers get a retriable error.
 */
export async function createIdSource({ pool, service, logger, lease: timing = {} }: IdSourceDeps): Promise<IdSource> {
  let lease: WorkerLease;
  let flake: Snowflake;
  let relaunch: Promise<void> | undefined;
  let closed = false;
  let wakeRelaunch: (() => void) | undefined;

  const acquire = async (): Promise<void> => {
    // The lease reports the generator's high-water mark, and the generator is made after the lease.
    const generator: { current?: Snowflake } = {};
    const next = createWorkerLease({
      pool,
      namespace: service,
      maxWorkers: WORKERS_PER_SERVICE,
      owner: service,
      ...timing,
      onLost: ({ workerId }) => {
        logger.error({ workerId }, 'id worker lease lost; leasing a new worker id');
        relaunch ??= reacquire().finally(() => (relaunch = undefined));
      },
      onRenewError: (error) => logger.warn({ err: error }, 'id worker lease renewal failed'),
      lastIssuedMs: () => generator.current?.lastIssuedMs() ?? 0,
    });
    const slot = await next.acquire();
    lease = next;
    generator.current = createSnowflake({
      workerId: serviceSlot[service] * WORKERS_PER_SERVICE + slot,
      isValid: () => next.valid,
      issuedUpToMs: next.issuedUpToMs,
      onClockBackward: (ms) => logger.warn({ ms }, 'clock moved backwards; waiting it out'),
    });
    flake = generator.current;
  };
  // Nobody awaits a relaunch: a rejection here would be unhandled and end the process.
  const reacquire = async (): Promise<void> => {
    for (let delay = 100; !closed; delay = Math.min(delay * 2, 5_000)) {
      try {
        await acquire();
        logger.info({ workerId: flake.workerId }, 'new id worker leased');
        return;
      } catch (error) {
        logger.error({ err: error, retryInMs: delay }, 'leasing a new id worker failed; retrying');
        await new Promise<void>((resolve) => {
          const timer = setTimeout(resolve, delay);
          wakeRelaunch = () => {
            clearTimeout(timer);
            resolve();
          };
        });
        wakeRelaunch = undefined;
      }
    }
  };
  await acquire();

  return {
    async next() {
      if (closed) throw new ServiceKitError(ServiceKitErrors.DATABASE_UNAVAILABLE, 'the id source is closed', { retriable: true });
      try {
        return await flake.next();
      } catch (error) {
        // A lost or unconfirmed lease is a passing condition (the database, a pause); the caller retries.
        throw new ServiceKitError(ServiceKitErrors.ID_UNAVAILABLE, `no id can be issued now: ${(error as Error).message}`, { cause: error, retriable: true });
      }
    },
    tryNext: () => (closed ? undefined : flake.tryNext()),
    workerId: () => flake.workerId,
    async close() {
      closed = true;
      wakeRelaunch?.();
      await relaunch?.catch(() => undefined);
      await lease.release();
    },
  };
}
