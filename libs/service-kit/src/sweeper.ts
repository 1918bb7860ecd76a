import { startSpan, type Logger, type Metrics, type SagaFacts } from '@labelflow/telemetry';
import { isTransientDbError, withTransaction, type Pool, type PoolClient } from './db';
import type { Emit, EventDraft } from './events';
import type { Lifecycle } from './lifecycle';

/**
 * A durable deadline: rows in the service's own database that become due (an assignment lease, a
 * review SLA). Due rows are claimed with FOR UPDATE SKIP LOCKED and fired in the same transaction
 * as the state change and the outbox rows, so a deadline fires exactly once across any number of
 * instances and survives restarts (it is just a row until it fires).
 */
export interface Sweeper {
  readonly name: string;
  /** Locks and returns up to `limit` due keys (SELECT ... FOR UPDATE SKIP LOCKED). */
  claimDue(tx: PoolClient, limit: number, now: Date): Promise<readonly string[]>;
  /** Fires one due key: changes its state and returns the events to emit (none if no longer due). */
  fire(tx: PoolClient, key: string, now: Date): Promise<readonly EventDraft[]>;
  /** The saga a key belongs to (its task), for the trace a firing starts; none when absent. */
  factsOf?(key: string): SagaFacts;
}

export interface SweeperDeps {
  readonly pool: Pool;
  readonly emit: Emit;
  readonly logger: Logger;
  readonly metrics?: Metrics;
  readonly now: () => Date;
  /**
   * How far the service's consumer has caught up (see ConsumerLoop.caughtUpTo); undefined while
   * unknown. A deadline is judged against a clock that never runs ahead of it: a task whose
   * LabelSubmitted is still waiting unread in Kafka is not reopened as if its annotator had
   * never submitted. It cannot see what another service committed and has not yet relayed to
   * Kafka: a submission held in label-svc's outbox for longer than the deadline's grace
   * (ASSIGNMENT_LEASE_GRACE_MS, 30 s) arrives after the reopen and is refused as a stale attempt.
   * The grace is what covers relay lag (watch `outbox_publish_failures_total`). Absent for a service that
   * consumes nothing.
   */
  readonly caughtUpTo?: () => number | undefined;
  readonly everyMs: number;
  readonly batchSize?: number;
}

/** The sweep's clock: now, held back to where the consumer has caught up; undefined means wait. */
export function sweepClock(deps: Pick<SweeperDeps, 'now' | 'caughtUpTo'>): Date | undefined {
  const now = deps.now();
  if (!deps.caughtUpTo) return now;
  const caughtUp = deps.caughtUpTo();
  if (caughtUp === undefined) return undefined;
  return caughtUp < now.getTime() ? new Date(caughtUp) : now;
}

const transient = (error: unknown): boolean => (error as { retriable?: unknown } | null)?.retriable === true || isTransientDbError(error);

/**
 * Sweeps once: fires everything due now, batch by batch. Returns how many keys fired.
 *
 * Each key fires under a savepoint of the batch's transaction: a key whose firing throws (its row
 * or its event refused, whatever the cause) is rolled back alone and tried again next sweep, while
 * the rest of the batch commits. Without it one such key, claimed first every time as the oldest
 * due, would roll every batch back and hold every deadline behind it for good.
 */
export async function sweepOnce(sweeper: Sweeper, deps: SweeperDeps): Promise<number> {
  const batchSize = deps.batchSize ?? 100;
  let total = 0;
  for (;;) {
    const now = sweepClock(deps);
    if (!now) return total;
    const { claimed, fired, failed } = await withTransaction(deps.pool, async (tx) => {
      const keys = await sweeper.claimDue(tx, batchSize, now);
      const failures: { key: string; error: unknown }[] = [];
      for (const key of keys) {
        await tx.query('SAVEPOINT deadline');
        // No request or message asked for a deadline: while a tracer records, each firing roots a
        // trace of its own, tagged with its saga, and the events it emits carry it onward, so a
        // compensation is one trace across the services rather than a trace per service.
        const span = startSpan(`deadline ${sweeper.name}`, { kind: 'internal', headers: {}, facts: sweeper.factsOf?.(key) ?? {}, attributes: { 'labelflow.deadline.sweeper': sweeper.name } });
        const fire = async () => deps.emit(tx, await sweeper.fire(tx, key, now), `deadline:${sweeper.name}:${key}`);
        try {
          await (span ? span.run(fire) : fire());
          await tx.query('RELEASE SAVEPOINT deadline');
          span?.end();
        } catch (error) {
          span?.end({ error });
          // A connection that failed cannot roll back to anything: the whole sweep fails and retries.
          await tx.query('ROLLBACK TO SAVEPOINT deadline');
          failures.push({ key, error });
        }
      }
      return { claimed: keys.length, fired: keys.length - failures.length, failed: failures };
    });
    // A lost race or a lock wait is the next sweep's business, as it always was; only a firing
    // refused for what it is (a row or an event no retry will change) is counted and alerted on.
    const refused = failed.filter(({ error }) => !transient(error));
    for (const { key, error } of failed) {
      if (transient(error)) deps.logger.debug({ err: error, sweeper: sweeper.name, key }, 'deadline not fired this sweep (transient); tried again next sweep');
      else deps.logger.warn({ err: error, sweeper: sweeper.name, key }, 'deadline failed to fire; the others fired, it is tried again next sweep');
    }
    if (refused.length > 0) deps.metrics?.counter('deadlines_failed_total', 'Due deadlines whose firing was refused (not a transient failure); each is tried again on the next sweep', ['sweeper']).inc({ sweeper: sweeper.name }, refused.length);
    total += fired;
    // A full batch may have more behind it, unless nothing of it fired: the same keys would come back.
    if (claimed < batchSize || fired === 0) return total;
  }
}

/** Runs `sweepOnce` every `everyMs` until the lifecycle closes; failures are logged and retried. */
export function startSweeper(sweeper: Sweeper, deps: SweeperDeps, lifecycle: Lifecycle): void {
  const fired = deps.metrics?.counter('deadlines_fired_total', 'Durable deadlines fired', ['sweeper']);
  // A sweep that fails as a whole (a batch's claim or transaction) leaves every deadline of that
  // batch and after it unfired, and deadlines_failed_total, which counts keys refused one by one,
  // never moves: counted here.
  const sweepsFailed = deps.metrics?.counter('deadline_sweeps_failed_total', 'Deadline sweeps that failed as a whole (a batch\'s claim or transaction), by whether waiting may fix it', ['sweeper', 'transient']);
  let running = true;
  let timer: NodeJS.Timeout | undefined;
  let current: Promise<void> = Promise.resolve();
  const tick = () => {
    current = sweepOnce(sweeper, deps)
      .then((n) => {
        if (n > 0) {
          fired?.inc({ sweeper: sweeper.name }, n);
          deps.logger.info({ sweeper: sweeper.name, fired: n }, 'deadlines fired');
        }
      })
      .catch((error: Error) => {
        sweepsFailed?.inc({ sweeper: sweeper.name, transient: String(transient(error)) });
        deps.logger.warn({ err: error, sweeper: sweeper.name }, 'deadline sweep failed; retrying');
      })
      .finally(() => {
        if (running) timer = setTimeout(tick, deps.everyMs);
      });
  };
  tick();
  lifecycle.onClose(`sweeper:${sweeper.name}`, async () => {
    running = false;
    clearTimeout(timer);
    await current;
  });
}
