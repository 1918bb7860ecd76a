import { describe, it, expect } from 'vitest';
import type { ProjectId } from '@labelflow/contracts';
import { deciderSpec } from '@labelflow/testing';
import { decide, type ProjectCommand } from './decide';
import { ledgerEntriesOf } from './ledger';
import { evolve, type ProjectState } from './state';

const projectId = '22222222-2222-4222-8222-222222222222' as ProjectId;
const MAX = Number.MAX_SAFE_INTEGER;

const { given, when, rejectionCode } = deciderSpec({ decide, evolve }, { initial: () => null, observed: () => [] });
const create = (budget: number): ProjectCommand => ({ type: 'CreateProject', projectId, name: 'cats', currency: 'EUR', pricePerTask: 250, machinePricePerTask: 0, budget, actor: 'ops-1' });
const topUp = (amount: number, actor = 'owner-1'): ProjectCommand => ({ type: 'TopUp', projectId, amount, actor });
/** A project as loaded: its balance, and what billing debited and refunded (booked by billing, not by a project event). */
const project = (balance: number, debited = 0, refunded = 0): ProjectState => ({
  projectId,
  name: 'cats',
  currency: 'EUR',
  pricePerTask: 250,
  machinePricePerTask: 0,
  balance,
  totals: { toppedUp: balance + debited - refunded, debited, refunded },
  version: 4,
});

describe('billing-svc projects: creating a project', () => {
  it('records a positive initial budget as one top-up by the admin who created the project', () => {
    const { decision, state } = when(given(), create(2_500));

    expect(decision.ok && ledgerEntriesOf(decision.events)).toEqual([{ projectId, kind: 'topup', amount: 2_500, taskId: null, attempt: null, annotatorId: null, actor: 'ops-1' }]);
    expect(state).toEqual({ projectId, name: 'cats', currency: 'EUR', pricePerTask: 250, machinePricePerTask: 0, balance: 2_500, totals: { toppedUp: 2_500, debited: 0, refunded: 0 }, version: 0 });
  });

  it('records nothing for an empty initial budget', () => {
    const { decision, state } = when(given(), create(0));

    expect(decision.ok && ledgerEntriesOf(decision.events)).toEqual([]);
    expect(state).toMatchObject({ balance: 0, totals: { toppedUp: 0, debited: 0, refunded: 0 } });
  });

  it('refuses to create a project that exists with PROJECT_EXISTS', () => {
    expect(rejectionCode(decide(create(0), project(0)))).toBe('PROJECT_EXISTS');
  });
});

describe('billing-svc projects: topping up', () => {
  it('raises the balance by the amount, and the topped-up total with it', () => {
    const { decision, state } = when(project(1_000), topUp(250));

    expect(decision.ok && ledgerEntriesOf(decision.events)).toEqual([{ projectId, kind: 'topup', amount: 250, taskId: null, attempt: null, annotatorId: null, actor: 'owner-1' }]);
    expect(state).toMatchObject({ balance: 1_250, totals: { toppedUp: 1_250 } });
  });

  it('rejects a top-up that would push the balance past the largest exact amount', () => {
    expect(when(project(MAX), topUp(1)).decision).toMatchObject({ ok: false, reason: { code: 'BUDGET_OVERFLOW' } });
  });

  it('keeps room for refunding everything billed: a top-up may fill the balance only up to the largest amount minus what a refund may return', () => {
    const billed = project(750, 400, 150);

    expect(when(billed, topUp(MAX - 1_000)).state?.balance).toBe(MAX - 250);
    expect(when(billed, topUp(MAX - 999)).decision).toMatchObject({ ok: false, reason: { code: 'BUDGET_OVERFLOW', message: expect.stringContaining('250') } });
  });

  it('refuses to top up a project that does not exist with PROJECT_NOT_FOUND', () => {
    expect(when(given(), topUp(250)).rejection).toBe('PROJECT_NOT_FOUND');
  });
});
