import { describe, it, expect } from 'vitest';
import type { ProjectId } from '@labelflow/contracts';
import { openingLedger, topUp } from './budget';

const projectId = '22222222-2222-4222-8222-222222222222' as ProjectId;

describe('openingLedger', () => {
  it('records a positive initial budget as one top-up', () => {
    expect(openingLedger(projectId, 2_500, 'ops-1')).toEqual([{ projectId, kind: 'topup', amount: 2_500, taskId: null, attempt: null, annotatorId: null, actor: 'ops-1' }]);
  });

  it('records nothing for an empty initial budget', () => {
    expect(openingLedger(projectId, 0, 'ops-1')).toEqual([]);
  });
});

describe('topUp', () => {
  it('raises the balance by the amount', () => {
    expect(topUp({ balance: 1_000, outstanding: 0 }, 250)).toEqual({ ok: true, value: 1_250 });
  });

  it('rejects a top-up that would push the balance past the largest exact amount', () => {
    expect(topUp({ balance: Number.MAX_SAFE_INTEGER, outstanding: 0 }, 1)).toMatchObject({ ok: false, reason: { code: 'BUDGET_OVERFLOW' } });
  });

  it('keeps room for refunding everything billed: a top-up may fill the balance only up to the largest amount minus what a refund may return', () => {
    const project = { balance: 750, outstanding: 250 };
    expect(topUp(project, Number.MAX_SAFE_INTEGER - 1_000)).toEqual({ ok: true, value: Number.MAX_SAFE_INTEGER - 250 });
    expect(topUp(project, Number.MAX_SAFE_INTEGER - 999)).toMatchObject({ ok: false, reason: { code: 'BUDGET_OVERFLOW', message: expect.stringContaining('250') } });
  });
});
