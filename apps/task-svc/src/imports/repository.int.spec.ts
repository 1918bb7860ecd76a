import { randomUUID } from 'node:crypto';
import type pg from 'pg';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import type { ProjectId } from '@labelflow/contracts';
import { migrate } from '@labelflow/service-kit';
import { freshDatabase } from '@labelflow/testing';
import { migrations } from '../migrations';
import { releaseImport } from './repository';
import { ImportStatus } from './decide';

const infra = inject('infra');

describe('task-svc import jobs: letting go of a job', () => {
  const db = freshDatabase(infra.pgUrl, 'imports_release', (pool) => migrate(pool, migrations));
  let pool: pg.Pool;
  beforeAll(async () => {
    pool = await db.open();
  });
  afterAll(() => db.close());

  /** A job held by `owner`, completed before (a completion instant) or extended by a grown file since (none). */
  const held = async (completedAt: string | null) => {
    const job = { projectId: randomUUID() as ProjectId, importId: randomUUID() };
    const owner = randomUUID();
    await pool.query(
      `INSERT INTO imports (project_id, import_id, created_by, status, prefix_sha256, owner, lease_expires_at, completed_at)
       VALUES ($1, $2, 'manager-1', 'running', 'x', $3, now() + interval '30 seconds', $4)`,
      [job.projectId, job.importId, owner, completedAt],
    );
    return { job, owner };
  };
  const statusOf = async (job: { projectId: string; importId: string }) =>
    (await pool.query<{ status: string; owner: string | null }>('SELECT status, owner FROM imports WHERE project_id = $1 AND import_id = $2', [job.projectId, job.importId])).rows[0];

  it('keeps a re-upload that wrote nothing new completed', async () => {
    const { job, owner } = await held('2030-01-01T00:00:00Z');
    await releaseImport(pool, job, owner, ImportStatus.completed);
    expect(await statusOf(job)).toEqual({ status: 'completed', owner: null });
  });

  it('reads a job as interrupted when a batch of new lines committed unseen (its answer lost), though the upload thought it wrote nothing', async () => {
    const { job, owner } = await held(null);
    await releaseImport(pool, job, owner, ImportStatus.completed);
    expect(await statusOf(job)).toEqual({ status: 'interrupted', owner: null });
  });

  it('leaves a job another upload holds now as it is', async () => {
    const { job } = await held(null);
    await releaseImport(pool, job, randomUUID(), ImportStatus.interrupted);
    expect((await statusOf(job))?.status).toBe('running');
  });
});
