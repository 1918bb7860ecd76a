import type { QaEvent, TaskId } from '@labelflow/contracts';
import { execute, type EventDraft, type Executed, type PoolClient, type StateStore } from '@labelflow/service-kit';
import { decide, type ReviewCommand, type ReviewDecidedEvent, type ReviewRejection } from './decide';
import { loadReviews, saveReviews } from './repository';
import { evolve, type ReviewTaskState } from './state';

const store: StateStore<ReviewTaskState, TaskId> = { load: (tx, taskId) => loadReviews(tx, taskId), save: saveReviews };
export const decider = { decide, evolve };

/** Local records (the review deadline) are folded into the state but never published. */
const isPublished = (event: ReviewDecidedEvent): event is EventDraft<QaEvent> => event.type !== 'ReviewDeadlineSet';

/** Only the events to publish, of a review command's outcome. */
export const published = (result: Executed<ReviewTaskState, ReviewDecidedEvent, ReviewRejection>): Executed<ReviewTaskState, EventDraft<QaEvent>, ReviewRejection> =>
  result.ok ? { ...result, events: result.events.filter(isPublished) } : result;

const keyOf = (command: ReviewCommand): TaskId => (command.type === 'OpenReview' || command.type === 'Observe' ? command.event.taskId : command.taskId);
const observedBy = (command: ReviewCommand) => (command.type === 'OpenReview' || command.type === 'Observe' ? [command.event] : []);

/**
 * Runs a review command in the caller's transaction (load, pure decide, fold, save); a consumed
 * event is folded in when accepted. Returns only the events to publish.
 */
export async function executeReview(tx: PoolClient, command: ReviewCommand) {
  return published(await execute(tx, { decider, store }, keyOf(command), command, observedBy(command)));
}
