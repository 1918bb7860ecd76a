import pg from 'pg';
import { sleep } from './harness';
import type { PrivateInfra } from './infra';
import { FaultKind, type PlannedFault } from './schedule';
import type { Supervisor } from './supervisor';

/** One fault as it happened. */
export interface InjectedFault extends PlannedFault {
  readonly startedAt: string;
  /** Tasks finished when it started. */
  readonly tasksDone: number;
  /** It came after the load had ended (the run was faster than the schedule). */
  readonly afterLoad: boolean;
  /** From the start of the fault until it was undone (the service restarted, the server up again). */
  readonly outageMs: number;
  /** From then until every service answered /readyz 200 with its consumer running. */
  readonly recoveryMs: number;
  readonly recovered: boolean;
  /** Details, e.g. how many backends were terminated. */
  readonly note?: string;
  /** The fault itself could not be carried out (a harness problem, reported as such). */
  readonly error?: string;
}

/** Terminates every session on the services' databases; returns how many there were. */
export async function dropConnections(pgUrl: string, databases: readonly string[]): Promise<number> {
  const admin = new pg.Client({ connectionString: `${pgUrl}/postgres`, connectionTimeoutMillis: 5_000 });
  admin.on('error', () => undefined);
  await admin.connect();
  try {
    const { rows } = await admin.query<{ n: string }>(
      'SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) AS n FROM pg_stat_activity WHERE datname = ANY($1::text[]) AND pid <> pg_backend_pid()',
      [databases],
    );
    return Number(rows[0]?.n ?? 0);
  } finally {
    await admin.end().catch(() => undefined);
  }
}

export interface FaultContext {
  readonly infra: Pick<PrivateInfra, 'kafka' | 'postgres' | 'redis'>;
  readonly supervisor: Pick<Supervisor, 'killAndRestart' | 'pause' | 'recovered'>;
  /** The four services' database names on the private server. */
  readonly databases: readonly string[];
  /** Aborted when the run starts cleaning up: the fault under way ends early and starts no server again. */
  readonly closing?: AbortSignal;
}

/** What a fault under way says when the cleanup cut it short. */
export const CUT_SHORT = 'cut short by the cleanup: not undone, the cleanup removes the server';

/**
 * Stops `server` and, after `hold`, starts it again: also when the stop failed (a server half
 * stopped is down all the same), but never once the cleanup has begun, which removes the server; a
 * start after that would leave a server running that nothing removes.
 */
async function outage(server: { stop(): Promise<void>; start(): Promise<void> }, closing: AbortSignal | undefined, hold: () => Promise<void> = async () => undefined): Promise<{ readonly stopMs: number; readonly startMs: number } | undefined> {
  const t = Date.now();
  let stopMs = 0;
  try {
    await server.stop();
    stopMs = Date.now() - t;
    await hold();
  } finally {
    if (!closing?.aborted) await server.start();
  }
  return closing?.aborted ? undefined : { stopMs, startMs: Date.now() - t - stopMs };
}

/** Carries out one fault and undoes it; resolves with a note once it is undone (not yet recovered). */
export async function inject(f: PlannedFault, ctx: FaultContext): Promise<string | undefined> {
  const { infra, supervisor, closing } = ctx;
  switch (f.kind) {
    case FaultKind.kill: {
      if (!f.service) throw new Error('a kill needs a service');
      return (await supervisor.killAndRestart(f.service)) ? undefined : 'not restarted';
    }
    case FaultKind.pgDrop:
      return `${await dropConnections(infra.postgres.url, ctx.databases)} backends terminated`;
    case FaultKind.pgRestart: {
      const took = await outage(infra.postgres, closing);
      return took ? `down ${((took.stopMs + took.startMs) / 1000).toFixed(1)} s` : CUT_SHORT;
    }
    case FaultKind.kafkaRestart: {
      const took = await outage(infra.kafka, closing);
      return took ? `stop ${(took.stopMs / 1000).toFixed(1)} s, start ${(took.startMs / 1000).toFixed(1)} s` : CUT_SHORT;
    }
    case FaultKind.redisOutage:
      return (await outage(infra.redis, closing, () => sleep(f.durationMs ?? 0, closing))) ? undefined : CUT_SHORT;
    case FaultKind.pause:
      if (!f.service) throw new Error('a pause needs a service');
      await supervisor.pause(f.service, f.durationMs ?? 0, closing);
      return closing?.aborted ? 'cut short by the cleanup' : undefined;
  }
}
