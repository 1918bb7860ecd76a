import type { TaskId } from '@labelflow/contracts';
import { execute, type PoolClient } from '@labelflow/service-kit';
import { decide, type LabelCommand } from './decide';
import { loadLabelTask, saveLabelTask } from './repository';
import { evolve } from './state';

// The assignment's compare-and-set is the first write of a save, so a lost race wrote nothing and
// the command can be decided again on the assignment that won.
const store = { load: (tx: PoolClient, taskId: string) => loadLabelTask(tx, taskId as TaskId), save: saveLabelTask, conflictRetries: 3 };
export const decider = { decide, evolve };

export function executeLabel(tx: PoolClient, command: LabelCommand) {
  if (command.type === 'Observe') return execute(tx, { decider, store }, command.event.taskId, command, [command.event]);
  return execute(tx, { decider, store }, command.taskId, command);
}
