import { CUT_SHORT, inject, type FaultContext, type InjectedFault } from './faults';
import { within } from './harness';
import { describeFault, type PlannedFault } from './schedule';

/** The load's progress, which the fault schedule follows: the load moves it, the fault runner waits on it. */
export interface LoadProgress {
  /** Tasks finished so far. */
  done: number;
  /** The load has ended (finished or failed). */
  over: boolean;
  /** The run is cleaning up: no further fault starts. */
  closing: boolean;
  /** Wakes the runner to look at the progress again. */
  tick(): void;
  /** Resolves at the next tick. */
  next(): Promise<void>;
}

export function createLoadProgress(): LoadProgress {
  let wake: (() => void) | undefined;
  return {
    done: 0,
    over: false,
    closing: false,
    tick() {
      wake?.();
      wake = undefined;
    },
    next: () => new Promise<void>((r) => (wake = r)),
  };
}

export interface FaultRunnerDeps {
  readonly planned: readonly PlannedFault[];
  /** Tasks in the whole load, for the progress lines. */
  readonly tasks: number;
  readonly recoveryMs: number;
  readonly progress: LoadProgress;
  readonly loadStarted: number;
  readonly context: FaultContext;
  readonly say: (line: string) => void;
  readonly signal?: AbortSignal;
  /** The fault under way (or being recovered from), which the supervisor names in its findings. */
  readonly setCurrentFault: (label: string | undefined) => void;
  /** Each fault as it happened is appended here. */
  readonly faults: InjectedFault[];
  readonly harnessErrors: string[];
}

/**
 * Injects the planned faults one at a time, each once the load has finished its `atTasks` (or
 * ended), and waits after each until every service is ready again. A fault that cannot be carried
 * out is a harness error, not a finding against the services.
 */
export async function runFaults(deps: FaultRunnerDeps): Promise<void> {
  const { planned, progress, context, say, signal, faults } = deps;
  const sup = context.supervisor;
  const closing = () => progress.closing || signal?.aborted === true || context.closing?.aborted === true;
  for (const f of planned) {
    while (progress.done < f.atTasks && !progress.over && !closing()) await progress.next();
    if (closing()) return;
    const label = `#${f.n} ${describeFault(f)}`;
    deps.setCurrentFault(label);
    const tasksDone = progress.done;
    const afterLoad = progress.over;
    say(`[fault ${f.n}/${planned.length}] after ${tasksDone}/${deps.tasks} tasks (${((Date.now() - deps.loadStarted) / 1000).toFixed(1)} s): ${describeFault(f)}${afterLoad ? ' (the load has ended)' : ''}`);
    const started = Date.now();
    let note: string | undefined;
    let error: string | undefined;
    try {
      note = await within((f.durationMs ?? 0) + deps.recoveryMs + 120_000, describeFault(f), inject(f, context));
    } catch (e) {
      error = (e as Error).message.split('\n')[0] ?? String(e);
      deps.harnessErrors.push(`fault ${label} could not be carried out: ${error}`);
    }
    const outageMs = Date.now() - started;
    if (context.closing?.aborted) {
      // The cleanup is waiting for this runner to stop the servers: nothing recovers now.
      deps.setCurrentFault(undefined);
      faults.push({ ...f, startedAt: new Date(started).toISOString(), tasksDone, afterLoad, outageMs, recoveryMs: 0, recovered: false, note: note ?? CUT_SHORT, ...(error ? { error } : {}) });
      say(`[fault ${f.n}/${planned.length}] cut short by the cleanup after ${(outageMs / 1000).toFixed(1)} s`);
      return;
    }
    deps.setCurrentFault(`${label} (recovering)`);
    const recovery = await sup.recovered(context.closing);
    deps.setCurrentFault(undefined);
    // The cleanup ended the wait for recovery: not a service that failed to come back.
    const cut = !recovery.ok && context.closing?.aborted === true;
    if (cut) note = note ? `${note}; recovery ${CUT_SHORT}` : `recovery ${CUT_SHORT}`;
    faults.push({ ...f, startedAt: new Date(started).toISOString(), tasksDone, afterLoad, outageMs, recoveryMs: recovery.ms, recovered: recovery.ok, ...(note ? { note } : {}), ...(error ? { error } : {}) });
    say(`[fault ${f.n}/${planned.length}] ${error ? `FAILED: ${error}` : 'done'}: outage ${(outageMs / 1000).toFixed(1)} s, every service ready ${(recovery.ms / 1000).toFixed(1)} s later${note ? ` (${note})` : ''}${recovery.ok || cut ? '' : ' — NOT RECOVERED'}`);
  }
}

/** The fault schedule under way, and the one way to end it early. */
export interface FaultRunner {
  /** Resolves once every planned fault is done and recovered from, or the runner stopped. */
  readonly done: Promise<void>;
  /**
   * Ends the fault under way and waits for the runner to stop, at most `boundMs` (then it says so
   * and resolves). From this call on no fault starts a server again: the cleanup that calls it
   * removes the servers next, and a server started after that would be left running.
   */
  stop(boundMs: number): Promise<void>;
}

/** Starts `runFaults`; the run's cleanup calls `stop` before it touches a server or a service. */
export function startFaults(deps: FaultRunnerDeps): FaultRunner {
  const closing = new AbortController();
  const done = runFaults({ ...deps, context: { ...deps.context, closing: closing.signal } }).catch((e: Error) => {
    deps.harnessErrors.push(`the fault runner failed: ${e.message}`);
  });
  return {
    done,
    async stop(boundMs) {
      closing.abort();
      // Wakes a runner waiting for the load to reach its next fault.
      deps.progress.tick();
      await within(boundMs, 'stopping the fault under way', done).catch((e: Error) => deps.say(`!!! ${e.message}; cleaning up anyway`));
    },
  };
}
