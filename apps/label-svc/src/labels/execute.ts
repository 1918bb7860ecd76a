import type { TaskId } from '@labelflow/contracts';
import { execute, type PoolClient, type StateStore } from '@labelflow/service-kit';
import { decide, type LabelCommand } from './decide';
import { loadLabelTask, saveLabelTask } from './repository';
import { evolve, type LabelTaskState } from './state';

// The assignment's compare-and-set is the first write of a save, so a lost race wrote nothing and
// the command can be decided again on the assignment that won.
const store: StateStore<LabelTaskState, TaskId> = { load: (tx, taskId) => loadLabelTask(tx, taskId), save: saveLabelTask, conflictRetries: 3 };
export const decider = { decide, evolve };

/** Runs a request's command in the caller's transaction; consumed events go through reactions.ts. */
export function executeLabel(tx: PoolClient, command: Exclude<LabelCommand, { type: 'Observe' }>) {
  return execute(tx, { decider, store }, command.taskId, command);
}
