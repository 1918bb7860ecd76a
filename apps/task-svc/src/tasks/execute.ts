import type { TaskId } from '@labelflow/contracts';
import { execute, type PoolClient, type StateStore } from '@labelflow/service-kit';
import { decide, type TaskCommand } from './decide';
import { loadTask, saveTask } from './repository';
import { evolve, type TaskState } from './state';

// A save is one compare-and-set statement, so a lost race wrote nothing: a claim that lost is
// decided again and rejected as already assigned, a cancel that raced a consumer applies on top.
const store: StateStore<TaskState | null, TaskId> = {
  conflictRetries: 3,
  load: (tx, taskId) => loadTask(tx, taskId),
  save: (tx, previous, next) => (next ? saveTask(tx, next, previous ? previous.version : null) : Promise.resolve()),
};
export const decider = { decide, evolve };

/** Runs a request's or a sweeper's command in the caller's transaction; consumed events go through reactions.ts. */
export function executeTask(tx: PoolClient, command: Exclude<TaskCommand, { type: 'Observe' }>) {
  return execute(tx, { decider, store }, command.taskId, command);
}
