import { describe, expect, it } from 'vitest';
import type { ProjectId } from '@labelflow/contracts';
import { decideStart, distinctTasks, MAX_REPORTED_ERRORS, progressOf, statusAt, summaryOf, type ImportJob, type LineError } from './decide';

const projectId = '6f1c1b9e-8a43-4a5e-9d6e-2f0a4b1c3d5e' as ProjectId;
const now = new Date('2026-01-01T00:00:00Z');
const start = (owner = 'upload-1', at = now) => ({ projectId, importId: 'imp', createdBy: 'mgr', owner, now: at, leaseMs: 30_000, emptyPrefix: 'empty' });
const task = (externalId: string, title = 't') => ({ externalId, title, dataUri: 'd' });

const newJob = (): ImportJob => {
  const decision = decideStart(start(), null);
  if (!decision.ok) throw new Error('expected a start');
  return decision.job;
};

describe('starting an upload of an import job', () => {
  it('starts a new job at line 0 with empty counts, held by the upload until its lease ends', () => {
    const job = newJob();
    expect(job).toMatchObject({ status: 'running', position: 0, prefixSha256: 'empty', lines: 0, created: 0, uploads: 1, owner: 'upload-1', leaseExpiresAt: new Date('2026-01-01T00:00:30Z') });
  });

  it('refuses a second upload while the first holds the job', () => {
    const decision = decideStart(start('upload-2', new Date('2026-01-01T00:00:10Z')), newJob());
    expect(decision).toMatchObject({ ok: false, reason: { code: 'IMPORT_IN_PROGRESS' } });
  });

  it('lets the same upload retry its start after the answer to its COMMIT was lost, as one upload', () => {
    const retried = decideStart(start('upload-1', new Date('2026-01-01T00:00:01Z')), newJob());
    expect(retried).toMatchObject({ ok: true, resumed: false, job: { owner: 'upload-1', uploads: 1, position: 0, leaseExpiresAt: new Date('2026-01-01T00:00:31Z') } });
  });

  it('lets a re-upload take over an interrupted job, or one whose upload stopped renewing its lease, keeping its progress', () => {
    const progressed: ImportJob = { ...newJob(), position: 1200, created: 900 };
    const interrupted = decideStart(start('upload-2'), { ...progressed, status: 'interrupted', owner: null, leaseExpiresAt: null });
    expect(interrupted).toMatchObject({ ok: true, resumed: true, job: { status: 'running', owner: 'upload-2', position: 1200, created: 900, uploads: 2 } });
    const lapsed = decideStart(start('upload-2', new Date('2026-01-01T00:01:00Z')), progressed);
    expect(lapsed).toMatchObject({ ok: true, job: { owner: 'upload-2', position: 1200 } });
  });

  it('shows a running job whose lease lapsed as interrupted', () => {
    const job = newJob();
    expect(statusAt(job, now)).toBe('running');
    expect(statusAt(job, new Date('2026-01-01T00:00:31Z'))).toBe('interrupted');
    expect(summaryOf(job, new Date('2026-01-01T00:00:31Z')).status).toBe('interrupted');
  });

  it('keeps a completed job completed when a re-upload of it died before its lease ran out', () => {
    const rerun = { ...newJob(), completedAt: new Date('2025-12-31T23:00:00Z') };
    expect(statusAt(rerun, now)).toBe('running');
    expect(statusAt(rerun, new Date('2026-01-01T00:00:31Z'))).toBe('completed');
  });
});

describe('the tasks a batch offers the insert', () => {
  it('takes the first line of each external id: a repeat with another title creates nothing', () => {
    const batch = { tasks: [task('a', 'first'), task('b'), task('a', 'second'), task('c')].map((t, i) => ({ line: i + 1, task: t })), errors: [] };
    expect(distinctTasks(batch)).toEqual([task('a', 'first'), task('b'), task('c')]);
  });
});

describe('the progress of a committed batch', () => {
  const errors = (n: number): LineError[] => Array.from({ length: n }, (_, i) => ({ line: i + 1, code: 'INVALID_JSON', message: 'x' }));

  it("counts the batch's lines, its valid lines as tasks for its write to split into created and already present, and every rejected line as rejected", () => {
    const batch = { tasks: [task('a'), task('a'), task('b')].map((t, i) => ({ line: i + 1, task: t })), errors: errors(2) };
    expect(progressOf(newJob(), batch, 7, 'p')).toEqual({ position: 7, prefixSha256: 'p', lines: 5, tasks: 3, rejected: 2, errors: errors(2), errorsTruncated: false });
  });

  it('keeps errors only up to the report cap and says the list was cut', () => {
    const job = { ...newJob(), errors: errors(MAX_REPORTED_ERRORS - 1) };
    const progress = progressOf(job, { tasks: [], errors: errors(3) }, 3, 'p');
    expect(progress.errors).toHaveLength(1);
    expect(progress).toMatchObject({ rejected: 3, errorsTruncated: true });
  });
});
