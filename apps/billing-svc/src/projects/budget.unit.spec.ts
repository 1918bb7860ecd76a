import { describe, it, expect } from 'vitest';
import type { ProjectId } from '@labelflow/contracts';
import { openingLedger, topUp } from './budget';

const projectId = '22222222-2222-4222-8222-222222222222' as ProjectId;

describe('openingLedger', () => {
  it('records a positive initial budget as one top-up', () => {
    expect(openingLedger(projectId, 2_500)).toEqual([{ projectId, kind: 'topup', amount: 2_500, taskId: null, attempt: null, annotatorId: null }]);
  });

  it('records nothing for an empty initial budget', () => {
    expect(openingLedger(projectId, 0)).toEqual([]);
  });
});

describe('topUp', () => {
  it('raises the balance by the amount', () => {
    expect(topUp(1_000, 250)).toEqual({ ok: true, value: 1_250 });
  });

  it('rejects a top-up that would push the balance past the largest exact amount', () => {
    expect(topUp(Number.MAX_SAFE_INTEGER, 1)).toMatchObject({ ok: false, reason: { code: 'BUDGET_OVERFLOW' } });
  });
});
