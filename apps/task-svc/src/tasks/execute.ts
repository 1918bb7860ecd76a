import type { TaskId } from '@labelflow/contracts';
import { execute, type PoolClient, type StateStore } from '@labelflow/service-kit';
import { decide, type TaskCommand } from './decide';
import { loadTask, saveTask, type TaskRecord } from './repository';
import { evolve, type TaskState } from './state';

/** Where a caller learns the task's row as the command left it: as saved, or as loaded when the command changed nothing. */
export interface TaskSeen {
  record?: TaskRecord | null;
}

// A save is one compare-and-set statement, so a lost race wrote nothing: a claim that lost is
// decided again and rejected as already assigned, a cancel that raced a consumer applies on top.
const storeFor = (seen: TaskSeen): StateStore<TaskState | null, TaskId> => ({
  conflictRetries: 3,
  load: async (tx, taskId) => (seen.record = await loadTask(tx, taskId)),
  save: async (tx, previous, next) => {
    if (next) seen.record = await saveTask(tx, next, previous ? previous.version : null);
  },
});
export const decider = { decide, evolve };

/** Runs a request's or a sweeper's command in the caller's transaction; consumed events go through reactions.ts. */
export function executeTask(tx: PoolClient, command: Exclude<TaskCommand, { type: 'Observe' }>, seen: TaskSeen = {}) {
  return execute(tx, { decider, store: storeFor(seen) }, command.taskId, command);
}
