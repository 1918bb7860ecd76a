import type { Consumer, ConsumerRunConfig } from 'kafkajs';
import type { Logger } from '@labelflow/telemetry';
import type { ConsumerMetrics } from './consumer-metrics';

/**
 * How the loop restarts a consumer after a crash kafkajs does not restart from itself (`restart:
 * false` on its CRASH event: a non-retriable error, such as a JoinGroup the broker refuses).
 */
export interface RestartPolicy {
  /** Wait before the first restart; it doubles with each crash that follows, up to `maxMs`. */
  readonly initialMs: number;
  readonly maxMs: number;
  /** A consumer that ran this long before it crashed starts over from `initialMs`. */
  readonly stableMs: number;
}

export const defaultRestart: RestartPolicy = { initialMs: 1_000, maxMs: 30_000, stableMs: 60_000 };

/**
 * `running`: a member of its group, consuming. `starting`: joining the group for the first time.
 * `restarting`: it crashed, and kafkajs or the loop is bringing it back. `stopped`: not started yet,
 * or closed.
 */
export type ConsumerState = 'stopped' | 'starting' | 'running' | 'restarting';
/** What a supervised consumer runs with (kafkajs's `consumer.run` options), so its callers need not import kafkajs. */
export type SupervisedRunConfig = ConsumerRunConfig;

export interface ConsumerHealth {
  readonly state: ConsumerState;
  /** When it entered this state (epoch ms). */
  readonly since: number;
  /** Crashes since the loop was created. */
  readonly crashes: number;
  /** Why it is not consuming, for readiness probes and operators; absent while `running`. */
  readonly reason?: string;
}

export interface SupervisionDeps {
  readonly consumer: Consumer;
  /** What a restart runs the consumer with: the same as the first start. */
  readonly runConfig: ConsumerRunConfig;
  readonly policy: RestartPolicy;
  readonly metrics: ConsumerMetrics;
  readonly log: Logger;
}

export interface Supervision {
  /** Records a state the loop itself brings the consumer to (starting, stopped). */
  enter(next: ConsumerState): void;
  health(): ConsumerHealth;
  /** Stops restarting, and waits for a restart under way to end. */
  close(): Promise<void>;
}

/**
 * Crash and restart supervision. kafkajs emits GROUP_JOIN after every join (the first, a
 * rebalance, a restart) and CRASH when the consumer died; after a crash with `restart: false`
 * nothing brings it back but this, with backoff, each crash logged and counted.
 */
export function superviseConsumer({ consumer, runConfig, policy, metrics, log }: SupervisionDeps): Supervision {
  let state: ConsumerState = 'stopped';
  let since = Date.now();
  let crashes = 0;
  let lastCrash: { readonly error: string; readonly by: 'kafkajs' | 'loop' } | undefined;
  let runningSince: number | undefined;
  let restartAttempt = 0;
  let nextRestartAt: number | undefined;
  let restartTimer: NodeJS.Timeout | undefined;
  let restarting: Promise<void> | undefined;
  let closed = false;
  const enter = (next: ConsumerState) => {
    if (state !== next) since = Date.now();
    state = next;
    metrics.runningGauge?.set(next === 'running' ? 1 : 0);
  };
  const restartDelay = (attempt: number) => Math.min(policy.maxMs, policy.initialMs * 2 ** Math.min(attempt, 16));

  consumer.on(consumer.events.GROUP_JOIN, () => {
    if (closed || state === 'running') return;
    const recovered = state === 'restarting';
    runningSince = Date.now();
    nextRestartAt = undefined;
    enter('running');
    if (recovered) log.info({ crashes, downForMs: Date.now() - since }, 'consumer running again after a crash');
  });

  consumer.on(consumer.events.CRASH, ({ payload }) => {
    if (closed) return;
    const { error, restart } = payload;
    crashes++;
    // Backoff grows over a crash loop, and starts over once a run proved stable.
    if (runningSince !== undefined && Date.now() - runningSince >= policy.stableMs) restartAttempt = 0;
    runningSince = undefined;
    lastCrash = { error: `${error.name}: ${error.message}`, by: restart ? 'kafkajs' : 'loop' };
    metrics.crashCount?.inc({ restart: lastCrash.by });
    enter('restarting');
    if (restart) {
      log.error({ err: error, crashes }, 'consumer crashed; kafkajs restarts it');
      return;
    }
    const delay = restartDelay(restartAttempt++);
    log.error({ err: error, crashes, attempt: restartAttempt, restartInMs: delay }, 'consumer crashed and kafkajs will not restart it; restarting it');
    scheduleRestart(delay);
  });

  function scheduleRestart(delay: number): void {
    clearTimeout(restartTimer);
    nextRestartAt = Date.now() + delay;
    restartTimer = setTimeout(() => {
      restartTimer = undefined;
      restarting = restartNow().finally(() => (restarting = undefined));
    }, delay);
  }

  /** A join the broker refuses again crashes again: the CRASH listener schedules the next try. */
  async function restartNow(): Promise<void> {
    if (closed) return;
    nextRestartAt = undefined;
    metrics.restartCount?.inc();
    log.warn({ attempt: restartAttempt, crashes }, 'restarting the crashed consumer');
    try {
      await consumer.connect();
      if (closed) return;
      await consumer.run(runConfig);
    } catch (error) {
      if (closed) return;
      const delay = restartDelay(restartAttempt++);
      lastCrash = { error: `${(error as Error).name}: ${(error as Error).message}`, by: 'loop' };
      log.error({ err: error, attempt: restartAttempt, restartInMs: delay }, 'restarting the consumer failed; trying again');
      scheduleRestart(delay);
    }
  }

  function health(): ConsumerHealth {
    const base = { state, since, crashes };
    switch (state) {
      case 'running':
        return base;
      case 'stopped':
        return { ...base, reason: closed ? 'the consumer was closed' : 'the consumer was not started' };
      case 'starting':
        return { ...base, reason: 'the consumer is joining its group' };
      case 'restarting': {
        const how = lastCrash?.by === 'kafkajs'
          ? 'kafkajs is restarting it'
          : nextRestartAt !== undefined
            ? `restart ${restartAttempt} in ${Math.max(0, nextRestartAt - Date.now())} ms`
            : `restart ${restartAttempt} under way`;
        return { ...base, reason: `the consumer crashed and has not consumed for ${Date.now() - since} ms (${crashes} ${crashes === 1 ? 'crash' : 'crashes'}, the last: ${lastCrash?.error ?? 'unknown error'}); ${how}` };
      }
    }
  }

  return {
    enter,
    health,
    async close() {
      closed = true;
      clearTimeout(restartTimer);
      await restarting;
    },
  };
}
