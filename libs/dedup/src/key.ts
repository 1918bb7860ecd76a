/**
 * The identity of an effect: which task, which step, which attempt of the task. The attempt is
 * what lets a legitimately repeated step through: after a QA rejection the task is relabelled and
 * LabelSubmitted arrives again for attempt 2, which task id + event type alone would swallow.
 */
export interface DedupKey {
  readonly taskId: string;
  readonly eventType: string;
  readonly attempt: number;
}

export const formatKey = (k: DedupKey): string => `${k.taskId}:${k.eventType}:${k.attempt}`;
