import { inject, type FaultContext, type InjectedFault } from './faults';
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
  for (const f of planned) {
    while (progress.done < f.atTasks && !progress.over && !progress.closing) await progress.next();
    if (progress.closing || signal?.aborted) return;
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
    deps.setCurrentFault(`${label} (recovering)`);
    const recovery = await sup.recovered();
    deps.setCurrentFault(undefined);
    faults.push({ ...f, startedAt: new Date(started).toISOString(), tasksDone, afterLoad, outageMs, recoveryMs: recovery.ms, recovered: recovery.ok, ...(note ? { note } : {}), ...(error ? { error } : {}) });
    say(`[fault ${f.n}/${planned.length}] ${error ? `FAILED: ${error}` : 'done'}: outage ${(outageMs / 1000).toFixed(1)} s, every service ready ${(recovery.ms / 1000).toFixed(1)} s later${note ? ` (${note})` : ''}${recovery.ok ? '' : ' — NOT RECOVERED'}`);
  }
}
