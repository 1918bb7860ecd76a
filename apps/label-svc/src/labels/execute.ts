import type { TaskId } from '@labelflow/contracts';
import { execute, type PoolClient } from '@labelflow/service-kit';
import { decide, type LabelCommand } from './decide';
import { loadLabelTask, saveLabelTask } from './repository';
import { evolve } from './state';

const store = { load: (tx: PoolClient, taskId: string) => loadLabelTask(tx, taskId as TaskId), save: saveLabelTask };
const decider = { decide, evolve };

export function executeLabel(tx: PoolClient, command: LabelCommand) {
  if (command.type === 'Observe') return execute(tx, { decider, store }, command.event.taskId, command, [command.event]);
  return execute(tx, { decider, store }, command.taskId, command);
}
