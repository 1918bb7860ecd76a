import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import type { ServiceName } from '@labelflow/contracts';
import { adminOf, devSigner, runProduction, type ProductionSummary } from '@labelflow/producer';
import { repoRoot, startStack, type TestStack } from '@labelflow/testing';
import { auditSettled, lostEventsSettled } from './after-load';
import { createLoadProgress, startFaults, type FaultRunner } from './fault-runner';
import type { InjectedFault } from './faults';
import { abortion, Aborted, bundleHashes, stopwatch, within } from './harness';
import { startPrivateInfra, type PrivateInfra } from './infra';
import type { ChaosOptions } from './options';
import { startProxy, type ServiceProxy } from './proxy';
import type { ChaosResult } from './report';
import { formatSchedule, planFaults, serviceOrder } from './schedule';
import { Supervisor } from './supervisor';

const run = promisify(execFile);

/**
 * How long the cleanup waits for the fault under way to end before it removes the servers anyway.
 * A cut-short fault ends at once unless a server's stop or start is already running, which takes
 * seconds; the bound only keeps a hung one from holding up the cleanup.
 */
const FAULT_STOP_MS = 120_000;

export interface ChaosHooks {
  /** One progress line (faults, tenths of the load, phases). */
  readonly say: (line: string) => void;
  /** Aborts the run (Ctrl-C, the time bound): everything started is stopped and removed. */
  readonly signal?: AbortSignal;
  /** Rebuild the service bundles first (scripts/build.mjs); default true. */
  readonly build?: boolean;
}

/**
 * A whole chaos run: private Kafka, PostgreSQL and Redis; the four built services on them (own topic
 * prefix, own databases) behind stable front doors; the producer's mixed scenarios; the fault
 * schedule injected one fault at a time while the load runs; then quiesce, the audit and the
 * lost-event check. Everything it starts is stopped and removed at the end, whatever happens.
 */
export async function runChaos(o: ChaosOptions, hooks: ChaosHooks): Promise<ChaosResult> {
  const { say, signal } = hooks;
  const t0 = Date.now();
  const phasesMs: Record<string, number> = {};
  const phase = async <T>(name: string, work: () => Promise<T>): Promise<T> => {
    const started = Date.now();
    try {
      return await Promise.race([work(), abortion(signal)]);
    } finally {
      phasesMs[name] = Date.now() - started;
    }
  };
  const planned = planFaults({ tasks: o.tasks, seed: o.seed, killsPerService: o.killsPerService, pgDrops: o.pgDrops, redisOutageMs: o.redisOutageMs, pauseMs: o.pauseMs, window: o.window });
  say(formatSchedule(planned, o.tasks, o.seed));

  const faults: InjectedFault[] = [];
  const harnessErrors: string[] = [];
  const notes: string[] = [];
  let infra: PrivateInfra | undefined;
  let stack: TestStack | undefined;
  // Kept so that an abort during a start still finds (and removes) what that start brings up.
  let infraStarting: Promise<PrivateInfra> | undefined;
  let stackStarting: Promise<TestStack> | undefined;
  let supervisor: Supervisor | undefined;
  const proxies = {} as Record<ServiceName, ServiceProxy>;
  let summary: ProductionSummary | undefined;
  let quiesced: boolean | undefined;
  let aborted: string | undefined;
  let quiesceError: string | undefined;
  let audit: ChaosResult['audit'];
  let auditError: string | undefined;
  let lost: ChaosResult['lost'];
  let lostError: string | undefined;
  let currentFault: string | undefined;
  let faultRunner: FaultRunner | undefined;
  let hashes: Record<string, string> = {};
  const progress = createLoadProgress();

  const result = (): ChaosResult => {
    const matrix: Record<string, Record<string, number>> = {};
    for (const r of summary?.runs ?? []) (matrix[r.scenario] ??= {})[r.outcome] = (matrix[r.scenario]?.[r.outcome] ?? 0) + 1;
    const changed = Object.entries(bundleHashes()).filter(([s, h]) => hashes[s] !== undefined && hashes[s] !== h).map(([s]) => s);
    return {
      tasks: o.tasks,
      duplicates: o.duplicates,
      seed: o.seed,
      qaSlaMs: o.qaSlaMs,
      prefix: stack?.prefix ?? '',
      startedAt: new Date(t0).toISOString(),
      durationMs: Date.now() - t0,
      phasesMs,
      planned,
      faults,
      ...(summary
        ? {
            production: {
              byScenario: summary.byScenario,
              byOutcome: summary.byOutcome,
              matrix,
              unexpected: summary.unexpected.map((u) => ({ scenario: u.scenario, outcome: u.outcome, ...(u.taskId ? { taskId: u.taskId } : {}), ...(u.error ? { error: u.error } : {}) })),
              duplicated: summary.duplicated,
              latencyMs: summary.latencyMs,
              durationMs: summary.durationMs,
              requestsPerStep: summary.requestsPerStep,
              rateLimited: summary.rateLimited,
            },
          }
        : {}),
      ...(quiesced !== undefined ? { quiesced } : {}),
      ...(aborted ? { aborted } : {}),
      ...(quiesceError ? { quiesceError } : {}),
      ...(audit ? { audit } : {}),
      ...(auditError ? { auditError } : {}),
      ...(lost ? { lost } : {}),
      ...(lostError ? { lostError } : {}),
      findings: supervisor?.findings ?? [],
      proxies: Object.fromEntries(Object.entries(proxies).map(([s, p]) => [s, p.stats()])),
      harnessErrors,
      notes: [...notes, ...(changed.length > 0 ? [`the service bundles of ${changed.join(', ')} changed on disk during the run (someone rebuilt them): restarts after that ran the new build`] : [])],
      logDir: o.logDir,
    };
  };

  try {
    if (hooks.build !== false) await phase('build', () => run('node', ['scripts/build.mjs'], { cwd: repoRoot, timeout: 180_000 }));
    hashes = bundleHashes();
    say('starting a private Kafka, PostgreSQL and Redis ...');
    infra = await phase('infrastructure', () => (infraStarting = startPrivateInfra()));
    say(`  kafka ${infra.kafka.brokers} (${infra.kafka.dir}), postgres ${infra.postgres.url}, redis ${infra.redis.url}`);
    // Neutralise fault switches the caller's environment might carry: the schedule is the only fault source.
    const base = { FAULT_KILL_BEFORE_PUBLISH: '0', FAULT_KILL_BEFORE_REPLY: '0', FAULT_BILLING_FAILURE_PREFIX: '' };
    const overrides: Partial<Record<ServiceName, Record<string, string>>> = Object.fromEntries(serviceOrder.map((s) => [s, { ...base }]));
    overrides['qa-svc'] = { ...base, QA_SLA_MS: String(o.qaSlaMs), SWEEP_INTERVAL_MS: '200' };
    const privateInfra = infra;
    stack = await phase('services', () => (stackStarting = startStack({ kafkaBrokers: privateInfra.kafka.brokers, pgUrl: privateInfra.postgres.url, redisUrl: privateInfra.redis.url }, overrides)));
    const theStack = stack;
    say(`  services up, topic prefix ${stack.prefix}`);
    // startStack configures the services with the local development key: tokens signed with it pass.
    const signer = await devSigner();
    const platformAdmin = adminOf(signer, 'chaos-admin');
    supervisor = new Supervisor({ stack, overrides, logDir: o.logDir, recoveryMs: o.recoveryMs, say, currentFault: () => currentFault, authorization: platformAdmin.authorization, ...(signal ? { signal } : {}) });
    const sup = supervisor;
    for (const name of serviceOrder) proxies[name] = await startProxy({ target: () => sup.target(name), holdMs: o.recoveryMs });

    // The load and the fault schedule, side by side.
    const loadStarted = Date.now();
    // Time kept back for the quiesce, the checks and the cleanup (they usually need seconds).
    const reserve = Math.min(o.quiesceMs + 90_000, 0.4 * o.maxRunMs);
    const loadBudget = Math.max(60_000, o.maxRunMs - (Date.now() - t0) - reserve);
    const databases = serviceOrder.map((s) => new URL(theStack.databases[s]).pathname.slice(1));
    // How long faults have been under way (injected until every service is ready again): the
    // load's deadline moves by it, so a host slow to restart Kafka does not turn waiting sagas into
    // stuck ones.
    const faultClock = stopwatch();

    say(`load: ${o.tasks} tasks, concurrency ${o.concurrency}, duplicates ${o.duplicates}, rates reject ${o.rates.reject} billing-fail ${o.rates.billingFail} qa-timeout ${o.rates.qaTimeout} cancel ${o.rates.cancel}, deadline ${Math.round(loadBudget / 1000)} s plus the time faults are under way`);
    faultRunner = startFaults({
      planned,
      tasks: o.tasks,
      recoveryMs: o.recoveryMs,
      progress,
      loadStarted,
      context: { infra: privateInfra, supervisor: sup, databases },
      say,
      ...(signal ? { signal } : {}),
      setCurrentFault: (label) => {
        currentFault = label;
        faultClock.set(label !== undefined);
      },
      faults,
      harnessErrors,
    });
    summary = await phase('load', async () => {
      try {
        return await runProduction({
          urls: { task: proxies['task-svc'].url, label: proxies['label-svc'].url, qa: proxies['qa-svc'].url, billing: proxies['billing-svc'].url },
          tasks: o.tasks,
          concurrency: o.concurrency,
          annotators: o.annotators,
          signer,
          price: o.price,
          rates: o.rates,
          duplicates: o.duplicates,
          kafka: { brokers: [privateInfra.kafka.brokers], topicPrefix: theStack.prefix },
          timeoutMs: loadBudget,
          runTimeoutMs: loadBudget,
          deadlineExtensionMs: faultClock.elapsedMs,
          waitS: 10,
          seed: o.seed,
          onProgress: (d, total) => {
            progress.done = d;
            progress.tick();
            if (progress.closing) return;
            if (d === total || Math.floor((d * 10) / total) > Math.floor(((d - 1) * 10) / total)) {
              say(`[load] ${Math.floor((100 * d) / total)}%: ${d}/${total} tasks done, ${((Date.now() - loadStarted) / 1000).toFixed(1)} s, faults injected ${faults.length}/${planned.length}`);
            }
          },
        });
      } finally {
        progress.over = true;
        progress.tick();
      }
    });
    say(`load done in ${(summary.durationMs / 1000).toFixed(1)} s: ${Object.entries(summary.byOutcome).map(([k, v]) => `${k} ${v}`).join(', ')}; unexpected ${summary.unexpected.length}`);
    if (faults.length < planned.length) say(`  ${planned.length - faults.length} faults still to come after the load`);
    const runner = faultRunner;
    await phase('remaining faults', () => runner.done);
    const late = faults.filter((f) => f.afterLoad).length;
    if (late > 0) notes.push(`${late} faults came after the load had ended (the load was faster than the schedule); more tasks spread them over the load`);

    say(`quiescing (outboxes drained, consumer lag 0; at most ${o.quiesceMs / 1000} s) ...`);
    try {
      await phase('quiesce', () => theStack.quiesce(o.quiesceMs));
      quiesced = true;
    } catch (e) {
      if (e instanceof Aborted) throw e;
      quiesced = false;
      quiesceError = (e as Error).message.split('\n')[0];
      say(`!!! the stack did not come to rest: ${quiesceError}`);
    }

    say('auditing (REPEATABLE READ per database) ...');
    const target = { stack: theStack, kafkaBrokers: privateInfra.kafka.brokers };
    await phase('audit', () => auditSettled(target, (a, e) => ((audit = a), (auditError = e))));
    say(`  ${audit ? `${audit.violations.length} violations, ${audit.deadLetters.length} dead letters` : `audit failed: ${auditError}`}`);

    say('checking for lost events (outbox rows vs topics by event id, emitted keys vs every consumer inbox) ...');
    await phase('lost events', () => lostEventsSettled(target, say, (l, e) => ((lost = l), (lostError = e))));
    say(`  ${lost ? `${lost.lost} lost (${lost.notOnKafka} not on Kafka, ${lost.missingInboxRows} inbox rows missing) of ${lost.outboxRows} outbox rows, ${lost.topicMessages} messages on the topics` : `lost-event check failed: ${lostError}`}`);
    return result();
  } catch (e) {
    if (e instanceof Aborted) aborted = e.message;
    else harnessErrors.push(`run failed: ${(e as Error).message}`);
    return result();
  } finally {
    progress.closing = true;
    progress.tick();
    say('cleaning up: services, proxies, private Kafka, PostgreSQL and Redis ...');
    const cleanup = async () => {
      // First the fault under way, which may be about to start a server again: after this nothing
      // does, so what is removed below stays removed.
      await faultRunner?.stop(FAULT_STOP_MS);
      await Promise.allSettled(Object.values(proxies).map((p) => p.close()));
      await supervisor?.stopAll();
      // Aborted while the services were starting: startStack kills what it started if it fails, else we do.
      stack ??= stackStarting ? await within(250_000, 'starting the services', stackStarting).catch(() => undefined) : undefined;
      const started = stack;
      if (!supervisor && started) await Promise.allSettled(serviceOrder.map((s) => within(20_000, `stopping ${s}`, started.processes[s].stop()).catch(() => started.processes[s].kill())));
      infra ??= infraStarting ? await within(150_000, 'starting the infrastructure', infraStarting).catch(() => undefined) : undefined;
      await infra?.destroy(o.logDir);
    };
    await within(400_000, 'cleanup', cleanup()).catch((e: Error) => say(`!!! cleanup: ${e.message}`));
    say(`cleaned up; logs in ${o.logDir}`);
  }
}

