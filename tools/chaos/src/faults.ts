import pg from 'pg';
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

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

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
  readonly infra: PrivateInfra;
  readonly supervisor: Supervisor;
  /** The four services' database names on the private server. */
  readonly databases: readonly string[];
}

/** Carries out one fault and undoes it; resolves with a note once it is undone (not yet recovered). */
export async function inject(f: PlannedFault, ctx: FaultContext): Promise<string | undefined> {
  const { infra, supervisor } = ctx;
  switch (f.kind) {
    case FaultKind.kill: {
      if (!f.service) throw new Error('a kill needs a service');
      return (await supervisor.killAndRestart(f.service)) ? undefined : 'not restarted';
    }
    case FaultKind.pgDrop:
      return `${await dropConnections(infra.postgres.url, ctx.databases)} backends terminated`;
    case FaultKind.pgRestart: {
      const t = Date.now();
      await infra.postgres.stop();
      await infra.postgres.start();
      return `down ${((Date.now() - t) / 1000).toFixed(1)} s`;
    }
    case FaultKind.kafkaRestart: {
      const t = Date.now();
      await infra.kafka.stop();
      const stopped = Date.now() - t;
      await infra.kafka.start();
      return `stop ${(stopped / 1000).toFixed(1)} s, start ${((Date.now() - t - stopped) / 1000).toFixed(1)} s`;
    }
    case FaultKind.redisOutage:
      await infra.redis.stop();
      try {
        await sleep(f.durationMs ?? 0);
      } finally {
        await infra.redis.start();
      }
      return undefined;
    case FaultKind.pause:
      if (!f.service) throw new Error('a pause needs a service');
      await supervisor.pause(f.service, f.durationMs ?? 0);
      return undefined;
  }
}
