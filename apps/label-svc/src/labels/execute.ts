import { labelSubmittedAsV1, type LabelEvent, type TaskId } from '@labelflow/contracts';
import { execute, type EventDraft, type PoolClient, type StateStore } from '@labelflow/service-kit';
import type { LabelSvcConfig } from '../config';
import { decide, type LabelCommand } from './decide';
import { loadLabelTask, saveLabelTask } from './repository';
import { evolve, type LabelTaskState } from './state';

// The assignment's compare-and-set is the first write of a save, so a lost race wrote nothing and
// the command can be decided again on the assignment that won.
const store: StateStore<LabelTaskState, TaskId> = { load: (tx, taskId) => loadLabelTask(tx, taskId), save: saveLabelTask, conflictRetries: 3 };
export const decider = { decide, evolve };

/**
 * A decided LabelSubmitted as this instance writes it. `decide` always speaks the newest version;
 * which version goes on the wire is the deployment's choice, not the domain's. The emitter's types
 * know only the newest shape, but v1 is still a shape the topic's schema (and so the emitter's own
 * check) accepts, which is why the cast is sound.
 */
export const written = (version: LabelSvcConfig['LABEL_EVENT_VERSION']) => (draft: EventDraft<LabelEvent>): EventDraft<LabelEvent> =>
  version === 1 ? (labelSubmittedAsV1(draft) as unknown as EventDraft<LabelEvent>) : draft;

/** Runs a request's command in the caller's transaction; consumed events go through reactions.ts. */
export async function executeLabel(tx: PoolClient, command: Extract<LabelCommand, { type: 'SubmitLabels' }>, config: Pick<LabelSvcConfig, 'LABEL_EVENT_VERSION'>) {
  const result = await execute(tx, { decider, store }, command.taskId, command);
  return result.ok ? { ...result, events: result.events.map(written(config.LABEL_EVENT_VERSION)) } : result;
}
