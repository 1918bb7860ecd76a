import { pruneInbox } from '@labelflow/dedup';
import { pruneIdempotencyKeys } from '@labelflow/idempotency';
import { oldestPendingAgeSeconds } from '@labelflow/outbox';
import type { BaseConfig } from '../config';
import { limitHeapGrowth } from '../heap';
import { createMetricsApp } from '../http';
import { upkeepTables } from '../table-upkeep';
import { startSweeper } from '../sweeper';
import { buildService, type BuildDeps, type BuiltService } from './build';
import type { ServiceDefinition } from './definition';
import { closeHttpFirst } from './wire-http';
import { schedule } from './schedule';

export interface RunningService<C extends BaseConfig = BaseConfig> extends BuiltService<C> {
  /** Where the HTTP API listens. */
  readonly url: string;
  /** Where GET /metrics is served without a token, when METRICS_PORT is set. */
  readonly metricsUrl?: string;
}

/**
 * Starts a built service: the outbox relay, the background prunes, the consumer, then the
 * sweepers and chores, and last the HTTP listener, so `/readyz` answers only once all of it runs. A failed
 * start closes the whole service.
 */
export async function listen<C extends BaseConfig>(built: BuiltService<C>): Promise<RunningService<C>> {
  try {
    return await startBuilt(built);
  } catch (error) {
    await built.lifecycle.close();
    throw error;
  }
}

/** Builds and starts a service, as each `main.ts` does: the process is the service's own. */
export async function startService<C extends BaseConfig>(definition: ServiceDefinition<C>, config: C, deps: BuildDeps = {}): Promise<RunningService<C>> {
  limitHeapGrowth(config.HEAP_GROWING_PERCENT);
  return listen(await buildService(definition, config, deps));
}

async function startBuilt<C extends BaseConfig>(built: BuiltService<C>): Promise<RunningService<C>> {
  const { app, ctx, lifecycle, relay, consumer, consumedTopics, consumedInputTopics } = built;
  const consumes = consumedTopics.length + consumedInputTopics.length > 0;
  const { config, logger, pool } = ctx;
  relay.start();
  watchRelayLag(built, OUTBOX_AGE_EVERY_MS);
  schedule(lifecycle, 'inbox-prune', 3600_000, async (signal) => {
    const pruned = await pruneInbox(pool, config.DEDUP_INBOX_RETENTION_MS, undefined, signal);
    if (pruned > 0) logger.info({ pruned }, 'old inbox rows pruned');
  }, logger);
  if (consumes) await consumer.start();
  // After the consumer: deadlines are judged only on events it has caught up with.
  const caughtUpTo = consumes ? () => consumer.caughtUpTo() : undefined;
  for (const sweeper of built.sweepers) {
    startSweeper(sweeper, { pool, emit: ctx.emit, logger, metrics: ctx.metrics, now: ctx.now, ...(caughtUpTo ? { caughtUpTo } : {}), everyMs: config.SWEEP_INTERVAL_MS }, lifecycle);
  }
  for (const chore of built.chores) schedule(lifecycle, chore.name, chore.everyMs, (signal) => chore.run(signal), logger);
  schedule(lifecycle, 'idempotency-prune', 3600_000, async (signal) => void (await pruneIdempotencyKeys(pool, { signal })), logger);
  if (config.DB_UPKEEP_INTERVAL_MS > 0) keepTables(built, config.DB_UPKEEP_INTERVAL_MS);
  const metricsUrl = config.METRICS_PORT === undefined ? undefined : await listenForScrapers(built, config.METRICS_PORT);
  const url = await app.listen({ port: config.PORT, host: config.HOST });
  closeHttpFirst(lifecycle, app, ctx.signals);
  logger.info({ url, ...(metricsUrl ? { metricsUrl } : {}), topics: consumedTopics, ...(consumedInputTopics.length > 0 ? { inputTopics: consumedInputTopics } : {}) }, `${ctx.name} listening`);
  return { ...built, url, ...(metricsUrl ? { metricsUrl } : {}) };
}

/** GET /metrics without a token on its own port, for Prometheus in the private network. */
async function listenForScrapers<C extends BaseConfig>({ ctx, lifecycle }: BuiltService<C>, port: number): Promise<string> {
  const scrape = createMetricsApp({ logger: ctx.logger, metrics: ctx.metrics });
  lifecycle.add({ name: 'metrics-http', close: () => scrape.close() });
  return scrape.listen({ port, host: ctx.config.METRICS_HOST });
}

/**
 * Vacuums and analyzes the service's tables as autovacuum would while the server's autovacuum is
 * off (see table-upkeep.ts): without it, plans made on a fresh database scan whole tables forever.
 * On a connection of its own, as VACUUM needs, given back between rounds.
 */
function keepTables<C extends BaseConfig>({ ctx, lifecycle }: BuiltService<C>, everyMs: number): void {
  const visits = ctx.metrics.counter('db_table_upkeep_total', 'VACUUM (ANALYZE) and ANALYZE runs the service made on its own tables because autovacuum is off, by table and kind', ['table', 'kind']);
  let told = false;
  schedule(lifecycle, 'table-upkeep', everyMs, async (signal) => {
    const client = await ctx.pool.connect();
    if (signal.aborted) return client.release();
    // A VACUUM of a large table can outlast the close's budget, and its connection would keep the
    // pool from ending: the close cancels it (the next round starts over). The cancel names the
    // backend by pid, so the connection is destroyed, not lent again, once a cancel was sent: a
    // late cancel must not hit whatever statement its next borrower runs.
    let cancelled: Promise<unknown> | undefined;
    const cancel = () => (cancelled = ctx.pool.query('SELECT pg_cancel_backend($1)', [(client as unknown as { processID: number }).processID]).catch(() => undefined));
    signal.addEventListener('abort', cancel, { once: true });
    let tables: Awaited<ReturnType<typeof upkeepTables>>;
    try {
      tables = await upkeepTables(client);
    } finally {
      signal.removeEventListener('abort', cancel);
      await cancelled;
      client.release(cancelled !== undefined);
    }
    for (const { table, vacuum } of tables) visits.inc({ table, kind: vacuum ? 'vacuum' : 'analyze' });
    if (tables.length === 0) return;
    if (!told) ctx.logger.info('autovacuum is off on this server: the service vacuums and analyzes its own tables as autovacuum would (DB_UPKEEP_INTERVAL_MS)');
    told = true;
    ctx.logger.debug({ tables }, 'tables vacuumed or analyzed');
  }, ctx.logger);
}

/**
 * How often the age of the oldest unpublished outbox row is read for `outbox_oldest_pending_seconds`
 * (one index lookup). Every second, so the gauge is never more than a second stale: counting a row's
 * age up between reads would go on after it was published, and a relay steadily a second or two
 * behind would cross OutboxBehind's 5 s.
 */
const OUTBOX_AGE_EVERY_MS = 1_000;

/**
 * The relay's lag as a gauge: the age of the oldest outbox row not yet published. Deadlines in
 * other services hold only while it stays under their grace (ASSIGNMENT_LEASE_GRACE_MS), so it is
 * watched (alert OutboxBehind) rather than left to show up as sagas refused for stale attempts.
 */
function watchRelayLag<C extends BaseConfig>({ ctx, lifecycle }: BuiltService<C>, everyMs: number): void {
  const age = ctx.metrics.gauge('outbox_oldest_pending_seconds', 'Age of the oldest outbox row not yet published to Kafka (0 when none waits): how far the relay is behind');
  schedule(lifecycle, 'outbox-age', everyMs, async () => void age.set(await oldestPendingAgeSeconds(ctx.pool)), ctx.logger);
}

