import { describe, expect, it } from 'vitest';
import { buildPrelabelProposed, type AnnotatorId, type ProjectId, type TaskAssigned, type TaskCancelled, type TaskId, type TaskReopened } from '@labelflow/contracts';
import type { EventDraft } from '@labelflow/service-kit';
import { deciderSpec } from '@labelflow/testing';
import { decide, type LabelCommand } from './decide';
import { emptyState, evolve, type LabelTaskState, type PrelabelPolicy } from './state';

const taskId = '7000000000000000001' as TaskId;
const projectId = '22222222-2222-4222-8222-222222222222' as ProjectId;
const alice = 'alice' as AnnotatorId;
const t0 = new Date('2030-01-01T00:00:00.000Z');
const lease = '2030-01-01T01:00:00.000Z';
const envelope = (attempt: number) => ({ version: 1 as const, taskId, projectId, attempt });
const taskAssigned = (attempt = 1, leaseExpiresAt = lease): EventDraft<TaskAssigned> => ({ ...envelope(attempt), type: 'TaskAssigned', payload: { annotatorId: alice, leaseExpiresAt } });
const taskReopened = (attempt: number): EventDraft<TaskReopened> => ({ ...envelope(attempt), type: 'TaskReopened', payload: { reason: 'QA_REJECTED', previousAttempt: attempt - 1, previousAnnotatorId: alice } });
const taskCancelled = (): EventDraft<TaskCancelled> => ({ ...envelope(1), type: 'TaskCancelled', payload: { reason: 'closed', cancelledBy: 'admin-1', previousStatus: 'assigned' } });

const proposal = (attempt = 1, confidences: readonly number[] = [0.95, 0.99], model = { name: 'cat-detector', version: '2.1' }) =>
  buildPrelabelProposed({ id: `p-${attempt}`, taskId, projectId, attempt, model, annotations: confidences.map((confidence, i) => ({ label: `l${i}`, confidence })), occurredAt: t0.toISOString() });
const policy = (p: Partial<PrelabelPolicy> = {}): PrelabelPolicy => ({ projectId, autoSubmit: true, minConfidence: 0.9, model: null, ...p });
const receive = (p = proposal(), now = t0): LabelCommand => ({ type: 'ReceivePrelabel', proposal: p, now });

const { given, when, rejectionCode } = deciderSpec({ decide, evolve }, { initial: () => emptyState(taskId), observed: (c) => (c.type === 'ReceivePrelabel' ? [c.proposal] : c.type === 'Observe' ? [c.event] : []) });
const withPolicy = (state: LabelTaskState, p: PrelabelPolicy | null = policy()): LabelTaskState => ({ ...state, prelabelPolicy: p });

describe('label-svc: machine pre-labels', () => {
  it('keeps a proposal for a task it has not heard of yet, to show once the assignment arrives', () => {
    const { decision, state } = when(given(), receive());
    expect(decision).toEqual({ ok: true, events: [] });
    expect(state.newPrelabels.map((p) => [p.attempt, p.model.name, p.autoSubmitted])).toEqual([[1, 'cat-detector', false]]);
  });

  it('refuses a proposal for an attempt the task has left with STALE_ATTEMPT and keeps nothing', () => {
    expect(rejectionCode(decide(receive(proposal(1)), given(taskAssigned(1), taskReopened(2))))).toBe('STALE_ATTEMPT');
  });

  it('refuses a proposal for a cancelled task with TASK_CANCELLED', () => {
    expect(rejectionCode(decide(receive(), given(taskAssigned(1), taskCancelled())))).toBe('TASK_CANCELLED');
  });

  it('refuses a proposal that names another project than the task with PROJECT_MISMATCH', () => {
    const other = buildPrelabelProposed({ ...proposal(), projectId: '33333333-3333-4333-8333-333333333333' });
    expect(rejectionCode(decide(receive(other), given(taskAssigned(1))))).toBe('PROJECT_MISMATCH');
  });

  it('submits the labels as the model, naming the attempt\'s holder, when the policy allows it and every confidence reaches the threshold', () => {
    const { decision, state } = when(withPolicy(given(taskAssigned(1))), receive());
    expect(decision.ok && decision.events).toEqual([
      { ...envelope(1), version: 2, type: 'LabelSubmitted', payload: { annotatorId: 'model.cat-detector@2.1', annotations: [{ label: 'l0', confidence: 0.95 }, { label: 'l1', confidence: 0.99 }], durationMs: null, heldBy: alice } },
    ]);
    expect(state.labels.map((l) => [l.attempt, l.annotatorId, l.status])).toEqual([[1, 'model.cat-detector@2.1', 'submitted']]);
    expect(state.newPrelabels.map((p) => p.autoSubmitted)).toEqual([true]);
  });

  it('only keeps the proposal when one confidence is below the threshold', () => {
    const { decision } = when(withPolicy(given(taskAssigned(1))), receive(proposal(1, [0.95, 0.89])));
    expect(decision).toEqual({ ok: true, events: [] });
  });

  it('only keeps the proposal when the policy names another model, is off, or is unset', () => {
    for (const p of [policy({ model: { name: 'other', version: '1' } as PrelabelPolicy['model'] }), policy({ autoSubmit: false }), null]) {
      expect(when(withPolicy(given(taskAssigned(1)), p), receive()).decision).toEqual({ ok: true, events: [] });
    }
  });

  it('only keeps the proposal when the attempt does not accept labels now: unassigned, lease over, or already labelled', () => {
    expect(when(withPolicy(given()), receive()).decision).toEqual({ ok: true, events: [] });
    expect(when(withPolicy(given(taskAssigned(1))), receive(proposal(), new Date(lease))).decision).toEqual({ ok: true, events: [] });
    const labelled = when(withPolicy(given(taskAssigned(1))), receive()).state;
    const second = proposal(1, [0.99], { name: 'dog-detector', version: '1' });
    expect(when(labelled, receive(second)).decision).toEqual({ ok: true, events: [] });
  });

  it('refuses a person whose token subject has the machine form with MACHINE_ACTOR_RESERVED', () => {
    const impostor = 'model.cat-detector@2.1' as AnnotatorId;
    const state = given({ ...taskAssigned(1), payload: { annotatorId: impostor, leaseExpiresAt: lease } });
    expect(rejectionCode(decide({ type: 'SubmitLabels', taskId, annotatorId: impostor, annotations: [{ label: 'x' }], now: t0 }, state))).toBe('MACHINE_ACTOR_RESERVED');
  });
});
