import type { ProjectId } from '@labelflow/contracts';
import { execute, type PoolClient, type StateStore } from '@labelflow/service-kit';
import { decide, type ProjectCommand } from './decide';
import { ledgerEntriesOf } from './ledger';
import { appendLedger, loadProjectState, saveProject } from './repository';
import { evolve, type ProjectState } from './state';

// The load locks the project's row, so a save never loses a compare-and-set: nothing to retry.
const store: StateStore<ProjectState | null, ProjectId> = { load: loadProjectState, save: saveProject };
export const decider = { decide, evolve };

/**
 * Runs a project command in the caller's transaction: the project's row, then the ledger entries its
 * events book (the row first: every entry references it).
 */
export async function executeProject(tx: PoolClient, command: ProjectCommand) {
  const result = await execute(tx, { decider, store }, command.projectId, command);
  if (result.ok) await appendLedger(tx, ledgerEntriesOf(result.events));
  return result;
}
