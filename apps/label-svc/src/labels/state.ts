import { machineActorId } from '@labelflow/contracts';
import type { Annotation, AnnotatorId, BillingCompleted, BillingFailed, BillingRefunded, LabelSubmitted, ModelRef, PrelabelAnnotation, PrelabelProposed, ProjectId, ProposalId, QaPassed, QaRejected, QaTimedOut, TaskAssigned, TaskCancelled, TaskId, TaskReopened } from '@labelflow/contracts';
import type { EventDraft } from '@labelflow/service-kit';

export const LabelStatus = { submitted: 'submitted', accepted: 'accepted', rejected: 'rejected', voided: 'voided' } as const;
export type LabelStatus = (typeof LabelStatus)[keyof typeof LabelStatus];

/** Why a label set was voided: the saga step that undid it. */
export const VoidReason = { qaTimedOut: 'QA_TIMED_OUT', billingFailed: 'BILLING_FAILED', cancelled: 'CANCELLED', superseded: 'SUPERSEDED' } as const;
export type VoidReason = (typeof VoidReason)[keyof typeof VoidReason];

/** Who may label the task now; learnt from TaskAssigned, since label-svc shares no database. */
export interface Assignment {
  readonly projectId: ProjectId;
  /** The newest attempt seen; kept while the attempt is unclaimed so older assignments stay stale. */
  readonly attempt: number;
  /** Null between TaskReopened and the new attempt's TaskAssigned (and once cancelled): nobody may submit then. */
  readonly annotatorId: AnnotatorId | null;
  /** ISO instant from which the assignee's labels are refused (task-svc reopens the task then). */
  readonly leaseExpiresAt: string | null;
  readonly version: number;
}

export interface Label {
  readonly attempt: number;
  readonly annotatorId: AnnotatorId;
  readonly annotations: readonly Annotation[];
  readonly status: LabelStatus;
  /** Set exactly when status is voided. */
  readonly voidReason: VoidReason | null;
  /**
   * True once the attempt's BillingCompleted arrived. billing-svc never fails an attempt it billed,
   * so a BillingFailed seen after it is a dead letter replayed from before an admin's retry: stale.
   */
  readonly billed: boolean;
}

/** A project's rule for machine pre-labels (PUT /projects/:projectId/prelabel-policy). */
export interface PrelabelPolicy {
  readonly projectId: ProjectId;
  /** Submit a proposal's labels as the model (a machine annotator) when every confidence reaches `minConfidence`. */
  readonly autoSubmit: boolean;
  readonly minConfidence: number;
  /** Only this model's proposals are submitted; any model's when null. */
  readonly model: ModelRef | null;
}

/** A model's label proposal for one attempt of the task, as stored. */
export interface Prelabel {
  readonly proposalId: ProposalId;
  readonly projectId: ProjectId;
  readonly attempt: number;
  readonly model: ModelRef;
  readonly annotations: readonly PrelabelAnnotation[];
  readonly proposedAt: string;
  /** True when label-svc submitted it as the model's labels. */
  readonly autoSubmitted: boolean;
}

export interface LabelTaskState {
  readonly taskId: TaskId;
  /**
   * The task's row in label-svc. TaskCancelled creates it even for a task label-svc never saw (a
   * tombstone), so an assignment or review outcome arriving after the cancellation finds it.
   */
  readonly assignment: Assignment | null;
  /** Absorbing: once true, every later event for the task is ignored and submissions refused. */
  readonly cancelled: boolean;
  /** One label set per attempt, newest last. */
  readonly labels: readonly Label[];
  /**
   * Proposals folded since the state was loaded (written by the save). Stored ones are never needed
   * to decide: the inbox makes each (attempt, model) arrive once, and the routes read them.
   */
  readonly newPrelabels: readonly Prelabel[];
  /** The task's project's pre-label policy, loaded with a batch that carries proposals (null otherwise or when unset). */
  readonly prelabelPolicy: PrelabelPolicy | null;
}

/** Events from other services that label-svc observes and folds into its state. */
export type LabelObservedEvent = EventDraft<
  TaskAssigned | TaskReopened | TaskCancelled | QaPassed | QaRejected | QaTimedOut | BillingFailed | BillingCompleted | BillingRefunded
>;
export type LabelStateEvent = LabelObservedEvent | EventDraft<LabelSubmitted> | PrelabelProposed;

export const emptyState = (taskId: TaskId): LabelTaskState => ({ taskId, assignment: null, cancelled: false, labels: [], newPrelabels: [], prelabelPolicy: null });

export const labelOf = (state: LabelTaskState, attempt: number): Label | undefined => state.labels.find((l) => l.attempt === attempt);

/** Normalised so a replayed assignment compares equal to the stored one (the database returns UTC). */
const isoOrNull = (iso: string | undefined): string | null => (iso === undefined ? null : new Date(iso).toISOString());

/** Applies `change` to every label; the state stays identical (evolve's no-op) when no label changed. */
const updateLabels = (state: LabelTaskState, change: (label: Label) => Label): LabelTaskState => {
  const labels = state.labels.map(change);
  return labels.some((label, i) => label !== state.labels[i]) ? { ...state, labels } : state;
};

const toStatus = (label: Label, status: LabelStatus): Label => (label.status === status && label.voidReason === null ? label : { ...label, status, voidReason: null });
const toVoided = (label: Label, reason: VoidReason): Label => (label.status === LabelStatus.voided ? label : { ...label, status: LabelStatus.voided, voidReason: reason });
const toBilled = (label: Label): Label => (label.billed ? label : { ...label, billed: true });
const onAttempt = (attempt: number, change: (label: Label) => Label) => (label: Label) => (label.attempt === attempt ? change(label) : label);

/** True when a billing failure voided the label: the one void a later successful billing undoes. */
export const voidedByBilling = (label: Label): boolean => label.status === LabelStatus.voided && label.voidReason === VoidReason.billingFailed;

/**
 * What a reopen leaves of an older attempt's labels. The reopen names why the attempt ended, and it
 * may reach label-svc before the QA verdict that caused it (they travel on different topics): so the
 * labels end as that verdict would leave them, whichever arrives first. Otherwise the attempt is
 * over: labels never reviewed will never be, and accepted ones are paid for by no one (billing
 * refunds or refuses a superseded attempt; it never keeps it).
 */
function endedByReopen(label: Label, event: Pick<TaskReopened, 'payload'>): Label {
  if (label.status !== LabelStatus.submitted && label.status !== LabelStatus.accepted) return label;
  if (label.attempt !== event.payload.previousAttempt) return toVoided(label, VoidReason.superseded);
  const reason = event.payload.reason;
  switch (reason) {
    case 'QA_REJECTED':
      return label.status === LabelStatus.submitted ? toStatus(label, LabelStatus.rejected) : toVoided(label, VoidReason.superseded);
    case 'QA_TIMED_OUT':
      return toVoided(label, VoidReason.qaTimedOut);
    case 'LEASE_EXPIRED':
      return toVoided(label, VoidReason.superseded);
    default: {
      const unhandled: never = reason;
      return unhandled;
    }
  }
}

/**
 * The labels of the attempts a reopen ends, ended. Also for a reopen older than the assignment
 * label-svc holds: one dead-lettered and replayed after the next attempt's TaskAssigned must still
 * end the attempts before it, and only those.
 */
export const endOlderAttempts = (state: LabelTaskState, event: Pick<TaskReopened, 'attempt' | 'payload'>): LabelTaskState =>
  updateLabels(state, (l) => (l.attempt < event.attempt ? endedByReopen(l, event) : l));

export function evolve(state: LabelTaskState, event: LabelStateEvent): LabelTaskState {
  // A cancelled task is a tombstone: nothing that arrives later can revive or change it.
  if (state.cancelled) return state;
  switch (event.type) {
    case 'TaskAssigned': {
      const current = state.assignment;
      const leaseExpiresAt = isoOrNull(event.payload.leaseExpiresAt);
      if (current && event.attempt < current.attempt) return state;
      if (current && current.attempt === event.attempt && current.annotatorId === event.payload.annotatorId && current.leaseExpiresAt === leaseExpiresAt) return state;
      return { ...state, assignment: { projectId: event.projectId, attempt: event.attempt, annotatorId: event.payload.annotatorId, leaseExpiresAt, version: current?.version ?? 0 } };
    }
    case 'TaskReopened': {
      // The previous assignee's claim ends with their attempt; the new attempt waits for its claim.
      const current = state.assignment;
      if (current && event.attempt <= current.attempt) return endOlderAttempts(state, event);
      const reopened = { ...state, assignment: { projectId: event.projectId, attempt: event.attempt, annotatorId: null, leaseExpiresAt: null, version: current?.version ?? 0 } };
      return endOlderAttempts(reopened, event);
    }
    case 'TaskCancelled': {
      const current = state.assignment;
      const cancelled: LabelTaskState = {
        ...state,
        cancelled: true,
        assignment: {
          projectId: current?.projectId ?? event.projectId,
          attempt: Math.max(current?.attempt ?? 0, event.attempt),
          annotatorId: null,
          leaseExpiresAt: null,
          version: current?.version ?? 0,
        },
      };
      return updateLabels(cancelled, (l) => (l.status === LabelStatus.submitted || l.status === LabelStatus.accepted ? toVoided(l, VoidReason.cancelled) : l));
    }
    case 'LabelSubmitted':
      if (labelOf(state, event.attempt)) return state;
      return {
        ...state,
        newPrelabels: state.newPrelabels.map((p) => (p.attempt === event.attempt && machineActorId(p.model) === event.payload.annotatorId ? { ...p, autoSubmitted: true } : p)),
        labels: [...state.labels, { attempt: event.attempt, annotatorId: event.payload.annotatorId, annotations: event.payload.annotations, status: LabelStatus.submitted, voidReason: null, billed: false }],
      };
    case 'PrelabelProposed': {
      // A proposal (when decide accepted it) is kept whether or not it was submitted; the
      // LabelSubmitted decided alongside marks it as the attempt's labels.
      const prelabel: Prelabel = { proposalId: event.id, projectId: event.projectId, attempt: event.attempt, model: event.model, annotations: event.annotations, proposedAt: event.occurredAt, autoSubmitted: false };
      return { ...state, newPrelabels: [...state.newPrelabels, prelabel] };
    }
    case 'QaPassed':
      return updateLabels(state, onAttempt(event.attempt, (l) => (l.status === LabelStatus.voided ? l : toStatus(l, LabelStatus.accepted))));
    case 'QaRejected':
      return updateLabels(state, onAttempt(event.attempt, (l) => (l.status === LabelStatus.voided ? l : toStatus(l, LabelStatus.rejected))));
    case 'QaTimedOut':
      return updateLabels(state, onAttempt(event.attempt, (l) => toVoided(l, VoidReason.qaTimedOut)));
    case 'BillingFailed':
      return updateLabels(state, onAttempt(event.attempt, (l) => toVoided(l, VoidReason.billingFailed)));
    case 'BillingCompleted':
      // Billing succeeded: after an admin retry (undoing the billing failure) or ahead of QaPassed.
      return updateLabels(state, onAttempt(event.attempt, (l) => toBilled(voidedByBilling(l) || l.status === LabelStatus.submitted ? toStatus(l, LabelStatus.accepted) : l)));
    case 'BillingRefunded': {
      const reason = event.payload.reason;
      switch (reason) {
        case 'TASK_CANCELLED':
          // Nothing to do here: TaskCancelled voided the labels.
          return state;
        case 'ATTEMPT_SUPERSEDED':
          return updateLabels(state, onAttempt(event.attempt, (l) => toVoided(l, VoidReason.superseded)));
        default: {
          const unhandled: never = reason;
          return unhandled;
        }
      }
    }
    default: {
      const unhandled: never = event;
      return unhandled;
    }
  }
}
