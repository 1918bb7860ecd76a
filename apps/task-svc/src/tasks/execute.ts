import type { TaskId } from '@labelflow/contracts';
import { execute, type PoolClient } from '@labelflow/service-kit';
import { decide, type TaskCommand } from './decide';
import { loadTask, saveTask } from './repository';
import { evolve, type TaskState } from './state';

// A save is one compare-and-set statement, so a lost race wrote nothing: a claim that lost is
// decided again and rejected as already assigned, a cancel that raced a consumer applies on top.
const store = {
  conflictRetries: 3,
  load: (tx: PoolClient, taskId: string) => loadTask(tx, taskId as TaskId),
  save: (tx: PoolClient, previous: TaskState | null, next: TaskState | null) => (next ? saveTask(tx, next, previous ? previous.version : null) : Promise.resolve()),
};
export const decider = { decide, evolve };

/** Runs a task command in the caller's transaction; a consumed event is folded in when accepted. */
export function executeTask(tx: PoolClient, command: TaskCommand) {
  if (command.type === 'Observe') return execute(tx, { decider, store }, command.event.taskId, command, [command.event]);
  return execute(tx, { decider, store }, command.taskId, command);
}
