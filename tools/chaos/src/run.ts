import { execFile } from 'node:child_process';
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import type { ServiceName } from '@labelflow/contracts';
import { adminOf, devSigner, runProduction, type ProductionSummary } from '@labelflow/producer';
import { repoRoot, startStack, type TestStack } from '@labelflow/testing';
import { auditSnapshot, findLostEvents } from './checks';
import { inject, type InjectedFault } from './faults';
import { startPrivateInfra, type PrivateInfra } from './infra';
import type { ChaosOptions } from './options';
import { startProxy, type ServiceProxy } from './proxy';
import type { ChaosResult } from './report';
import { describeFault, formatSchedule, planFaults, serviceOrder } from './schedule';
import { Supervisor } from './supervisor';

const run = promisify(execFile);
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export interface ChaosHooks {
  /** One progress line (faults, tenths of the load, phases). */
  readonly say: (line: string) => void;
  /** Aborts the run (Ctrl-C, the time bound): everything started is stopped and removed. */
  readonly signal?: AbortSignal;
  /** Rebuild the service bundles first (scripts/build.mjs); default true. */
  readonly build?: boolean;
}

class Aborted extends Error {}

/** Rejects as soon as `signal` aborts; for racing work that cannot be cancelled itself. */
const abortion = (signal?: AbortSignal) =>
  new Promise<never>((_, reject) => {
    if (!signal) return;
    const fail = () => reject(new Aborted(String(signal.reason ?? 'aborted')));
    if (signal.aborted) fail();
    else signal.addEventListener('abort', fail, { once: true });
  });

async function within<T>(ms: number, what: string, work: Promise<T>): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error(`${what} took longer than ${Math.round(ms / 1000)} s`)), ms)));
  try {
    return await Promise.race([work, timeout]);
  } finally {
    clearTimeout(timer);
  }
}

const bundleHashes = () =>
  Object.fromEntries(
    serviceOrder.map((s) => {
      try {
        return [s, createHash('sha256').update(readFileSync(join(repoRoot, `dist/apps/${s}/main.js`))).digest('hex').slice(0, 12)];
      } catch {
        return [s, 'missing'];
      }
    }),
  );

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
  let hashes: Record<string, string> = {};
  // The load's progress, which the fault schedule follows.
  let done = 0;
  let loadOver = false;
  let closing = false;
  let wake: (() => void) | undefined;
  const tick = () => {
    wake?.();
    wake = undefined;
  };

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

    const faultRunner = async () => {
      for (const f of planned) {
        while (done < f.atTasks && !loadOver && !closing) await new Promise<void>((r) => (wake = r));
        if (closing || signal?.aborted) return;
        const label = `#${f.n} ${describeFault(f)}`;
        currentFault = label;
        const tasksDone = done;
        const afterLoad = loadOver;
        say(`[fault ${f.n}/${planned.length}] after ${tasksDone}/${o.tasks} tasks (${((Date.now() - loadStarted) / 1000).toFixed(1)} s): ${describeFault(f)}${afterLoad ? ' (the load has ended)' : ''}`);
        const started = Date.now();
        let note: string | undefined;
        let error: string | undefined;
        try {
          note = await within((f.durationMs ?? 0) + o.recoveryMs + 120_000, describeFault(f), inject(f, { infra: privateInfra, supervisor: sup, databases }));
        } catch (e) {
          error = (e as Error).message.split('\n')[0] ?? String(e);
          harnessErrors.push(`fault ${label} could not be carried out: ${error}`);
        }
        const outageMs = Date.now() - started;
        currentFault = `${label} (recovering)`;
        const recovery = await sup.recovered();
        currentFault = undefined;
        faults.push({ ...f, startedAt: new Date(started).toISOString(), tasksDone, afterLoad, outageMs, recoveryMs: recovery.ms, recovered: recovery.ok, ...(note ? { note } : {}), ...(error ? { error } : {}) });
        say(`[fault ${f.n}/${planned.length}] ${error ? `FAILED: ${error}` : 'done'}: outage ${(outageMs / 1000).toFixed(1)} s, every service ready ${(recovery.ms / 1000).toFixed(1)} s later${note ? ` (${note})` : ''}${recovery.ok ? '' : ' — NOT RECOVERED'}`);
      }
    };

    say(`load: ${o.tasks} tasks, concurrency ${o.concurrency}, duplicates ${o.duplicates}, rates reject ${o.rates.reject} billing-fail ${o.rates.billingFail} qa-timeout ${o.rates.qaTimeout} cancel ${o.rates.cancel}, deadline ${Math.round(loadBudget / 1000)} s`);
    const faultsDone = faultRunner();
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
          waitS: 10,
          seed: o.seed,
          onProgress: (d, total) => {
            done = d;
            tick();
            if (closing) return;
            if (d === total || Math.floor((d * 10) / total) > Math.floor(((d - 1) * 10) / total)) {
              say(`[load] ${Math.floor((100 * d) / total)}%: ${d}/${total} tasks done, ${((Date.now() - loadStarted) / 1000).toFixed(1)} s, faults injected ${faults.length}/${planned.length}`);
            }
          },
        });
      } finally {
        loadOver = true;
        tick();
      }
    });
    say(`load done in ${(summary.durationMs / 1000).toFixed(1)} s: ${Object.entries(summary.byOutcome).map(([k, v]) => `${k} ${v}`).join(', ')}; unexpected ${summary.unexpected.length}`);
    if (faults.length < planned.length) say(`  ${planned.length - faults.length} faults still to come after the load`);
    await phase('remaining faults', () => faultsDone);
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
    await phase('audit', async () => {
      // In-flight work settles within seconds (the producer's audit waits the same way); a real violation stays.
      for (const until = Date.now() + 60_000; ; await sleep(2_000)) {
        try {
          audit = await within(120_000, 'the audit', auditSnapshot(theStack.databases, privateInfra.kafka.brokers, theStack.prefix));
          auditError = undefined;
        } catch (e) {
          auditError = (e as Error).message;
        }
        if ((audit?.ok && !auditError) || Date.now() > until) return;
      }
    });
    say(`  ${audit ? `${audit.violations.length} violations, ${audit.deadLetters.length} dead letters` : `audit failed: ${auditError}`}`);

    say('checking for lost events (outbox rows vs topics by event id, emitted keys vs every consumer inbox) ...');
    await phase('lost events', async () => {
      for (let round = 1; round <= 3; round++) {
        try {
          lost = await findLostEvents(theStack.databases, privateInfra.kafka.brokers, theStack.prefix);
          lostError = undefined;
        } catch (e) {
          lostError = (e as Error).message;
        }
        if ((lost && lost.lost === 0) || round === 3) return;
        // Something may still be on its way (a sweeper fired after the quiesce): settle and look again.
        say(`  ${lost ? `${lost.lost} events look lost` : `check failed: ${lostError}`}; settling and checking again (${round}/3)`);
        await theStack.quiesce(60_000).catch(() => undefined);
      }
    });
    say(`  ${lost ? `${lost.lost} lost (${lost.notOnKafka} not on Kafka, ${lost.missingInboxRows} inbox rows missing) of ${lost.outboxRows} outbox rows, ${lost.topicMessages} messages on the topics` : `lost-event check failed: ${lostError}`}`);
    return result();
  } catch (e) {
    if (e instanceof Aborted) aborted = e.message;
    else harnessErrors.push(`run failed: ${(e as Error).message}`);
    return result();
  } finally {
    closing = true;
    tick();
    say('cleaning up: services, proxies, private Kafka, PostgreSQL and Redis ...');
    const cleanup = async () => {
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

