import type { ModelName, ModelRef, ModelVersion, PrelabelAnnotation, ProjectId, ProposalId, TaskId } from '@labelflow/contracts';
import { unnestColumns, type Queryable } from '@labelflow/service-kit';
import type { Prelabel, PrelabelPolicy } from '../labels/state';

interface PolicyRow {
  project_id: string;
  auto_submit: boolean;
  min_confidence: number;
  model_name: string | null;
  model_version: string | null;
  updated_by: string;
  updated_at: Date;
}
interface PrelabelRow {
  task_id: string;
  attempt: number;
  model_name: string;
  model_version: string;
  proposal_id: string;
  project_id: string;
  annotations: PrelabelAnnotation[];
  proposed_at: Date;
  received_at: Date;
  auto_submitted: boolean;
}

export type PolicyRecord = PrelabelPolicy & { readonly updatedBy: string; readonly updatedAt: Date };
export type PrelabelRecord = Prelabel & { readonly receivedAt: Date };

const modelOf = (name: string | null, version: string | null): ModelRef | null => (name === null || version === null ? null : { name: name as ModelName, version: version as ModelVersion });

const toPolicy = (r: PolicyRow): PolicyRecord => ({
  projectId: r.project_id as ProjectId,
  autoSubmit: r.auto_submit,
  minConfidence: r.min_confidence,
  model: modelOf(r.model_name, r.model_version),
  updatedBy: r.updated_by,
  updatedAt: r.updated_at,
});

const toPrelabel = (r: PrelabelRow): PrelabelRecord => ({
  proposalId: r.proposal_id as ProposalId,
  projectId: r.project_id as ProjectId,
  attempt: r.attempt,
  model: modelOf(r.model_name, r.model_version)!,
  annotations: r.annotations,
  proposedAt: r.proposed_at.toISOString(),
  autoSubmitted: r.auto_submitted,
  receivedAt: r.received_at,
});

/**
 * The policies of the projects, by project id (a project without one is absent). `share` locks
 * them for the caller's transaction (a consumed batch's): a `PUT` of the policy then waits for the
 * batches deciding under the old one, so once it answers, no later commit auto-submits by it.
 */
export async function loadPolicies(db: Queryable, projectIds: readonly string[], { share = false }: { readonly share?: boolean } = {}): Promise<Map<string, PolicyRecord>> {
  if (projectIds.length === 0) return new Map();
  const { rows } = await db.query<PolicyRow>(`SELECT * FROM prelabel_policies WHERE project_id = ANY($1::uuid[])${share ? ' ORDER BY project_id FOR SHARE' : ''}`, [[...new Set(projectIds)]]);
  return new Map(rows.map((r) => [r.project_id, toPolicy(r)]));
}

export async function loadPolicy(db: Queryable, projectId: ProjectId): Promise<PolicyRecord | null> {
  return (await loadPolicies(db, [projectId])).get(projectId) ?? null;
}

/** Sets the project's policy (last write wins: it is a setting, not a history). */
export async function savePolicy(db: Queryable, policy: PrelabelPolicy, updatedBy: string): Promise<PolicyRecord> {
  const { rows } = await db.query<PolicyRow>(
    `INSERT INTO prelabel_policies (project_id, auto_submit, min_confidence, model_name, model_version, updated_by) VALUES ($1, $2, $3, $4, $5, $6)
     ON CONFLICT (project_id) DO UPDATE SET auto_submit = EXCLUDED.auto_submit, min_confidence = EXCLUDED.min_confidence, model_name = EXCLUDED.model_name,
       model_version = EXCLUDED.model_version, updated_by = EXCLUDED.updated_by, updated_at = now()
     RETURNING *`,
    [policy.projectId, policy.autoSubmit, policy.minConfidence, policy.model?.name ?? null, policy.model?.version ?? null, updatedBy],
  );
  return toPolicy(rows[0]!);
}

/**
 * Stores a batch's proposals with one statement. The inbox lets each (task, attempt, model) in once,
 * so a conflict cannot come from a duplicate delivery; DO NOTHING keeps the first regardless.
 */
export async function insertPrelabels(tx: Queryable, rows: readonly { readonly taskId: TaskId; readonly prelabel: Prelabel }[]): Promise<void> {
  if (rows.length === 0) return;
  await tx.query(
    `INSERT INTO prelabels (task_id, attempt, model_name, model_version, proposal_id, project_id, annotations, proposed_at, auto_submitted)
     SELECT task_id, attempt, model_name, model_version, proposal_id, project_id, annotations::jsonb, proposed_at, auto_submitted
     FROM unnest($1::text[], $2::int[], $3::text[], $4::text[], $5::text[], $6::uuid[], $7::text[], $8::timestamptz[], $9::boolean[])
       AS u(task_id, attempt, model_name, model_version, proposal_id, project_id, annotations, proposed_at, auto_submitted)
     ON CONFLICT (task_id, attempt, project_id, model_name, model_version) DO NOTHING`,
    unnestColumns(
      rows.map(({ taskId, prelabel: p }) => [taskId, p.attempt, p.model.name, p.model.version, p.proposalId, p.projectId, JSON.stringify(p.annotations), p.proposedAt, p.autoSubmitted]),
    ),
  );
}

/**
 * The task's proposals for one attempt, oldest first: those naming the task's project only. A
 * proposal kept before label-svc knew the task's project may name another; it is never shown.
 */
/** The latest `limit` proposals of the attempt, in the order they arrived. */
export async function listPrelabels(db: Queryable, taskId: TaskId, attempt: number, projectId: ProjectId, limit: number): Promise<PrelabelRecord[]> {
  const { rows } = await db.query<PrelabelRow>(
    'SELECT * FROM (SELECT * FROM prelabels WHERE task_id = $1 AND attempt = $2 AND project_id = $3 ORDER BY received_at DESC, model_name DESC, model_version DESC LIMIT $4) latest ORDER BY received_at, model_name, model_version',
    [taskId, attempt, projectId, limit],
  );
  return rows.map(toPrelabel);
}
