import type { FastifyInstance, FastifyRequest } from 'fastify';
import { checkIdempotencyKey, type IdempotentOptions } from '@labelflow/idempotency';
import { createSegmentAllocator, formatTaskNumber, ProjectKey } from '@labelflow/idgen';
import { z } from 'zod';
import { can, canSeeProject, Permission, projectsWith } from '@labelflow/auth';
import { AnnotatorId, Attempt, DataUri, ProjectId, storable, TaskId } from '@labelflow/contracts';
import { awaitTask, clientGone, decodeCursor, encodeCursor, guard, honourPreferWait, HttpError, PageQuery, parseInput, queryInt, type PoolClient, type ServiceContext } from '@labelflow/service-kit';
import type { TaskSvcConfig } from '../config';
import type { TaskCommand, TaskRejection } from './decide';
import { executeTask, type TaskSeen } from './execute';
import { listTasks, loadTask, projectKeyFor, TaskListPosition, type TaskRecord } from './repository';
import { TaskStatus } from './state';

const CreateTaskBody = z
  .object({ projectId: ProjectId, title: storable(z.string().trim().min(1).max(500)), dataUri: DataUri, projectKey: ProjectKey.optional() })
  .strict();
/** Task numbers of a project whose first task named no key read `TASK-1`, `TASK-2`, ... */
const DEFAULT_PROJECT_KEY = 'TASK';
/** The claimant is the caller; an `annotatorId`, if sent, must name the caller. */
const ClaimBody = z.object({ annotatorId: AnnotatorId.optional() }).strict().optional();
const CancelBody = z.object({ reason: storable(z.string().trim().min(1).max(2000)) }).strict();
const TaskParams = z.object({ taskId: TaskId });
const ListQuery = z.strictObject({
  projectId: ProjectId.optional(),
  status: z.enum(Object.values(TaskStatus) as [string, ...string[]]).optional(),
  ...PageQuery,
});
/** `a,b` or a repeated parameter (`?status=a&status=b`), as a list of statuses. */
const StatusList = z
  .union([z.string(), z.array(z.string())])
  .transform((value) => [value].flat().flatMap((s) => s.split(',')).map((s) => s.trim()))
  .pipe(z.array(z.enum(Object.values(TaskStatus) as [TaskStatus, ...TaskStatus[]])).min(1));
/** What the task must look like for a `Prefer: wait` read to answer before its wait is over. */
// Strict: a misspelt condition (`?stauts=`) would otherwise be no condition, answered at once.
const WaitConditions = z.strictObject({ status: StatusList.optional(), minAttempt: queryInt(1, Number.MAX_SAFE_INTEGER).pipe(Attempt).optional() });
type WaitConditions = z.infer<typeof WaitConditions>;
const matches = (task: TaskRecord, { status, minAttempt }: WaitConditions) => (!status || status.includes(task.status)) && (minAttempt === undefined || task.attempt >= minAttempt);

const statusFor: Record<TaskRejection['code'], number> = {
  TASK_CANCELLED: 409,
  LEASE_NOT_DUE: 409,
  MACHINE_ACTOR_RESERVED: 403,
  FORMER_REVIEWER: 403,
  MAY_READ_EARLIER_WORK: 403,
  NOT_BILLABLE: 409, TASK_EXISTS: 409, TASK_NOT_FOUND: 404, TASK_NOT_CLAIMABLE: 409, STALE_ATTEMPT: 409, TASK_NOT_REOPENABLE: 409 };

const taskNotFound = (taskId: string) => ({ code: 'TASK_NOT_FOUND', message: `task ${taskId} does not exist` });

/** Who holds a task is the project managers' business: a losing claimant learns only that it is taken. */
function rejection(reason: TaskRejection, request: FastifyRequest, task: TaskRecord | null): HttpError {
  const details = task?.assignee && can(request.principal, Permission.peopleRead, task.projectId) ? { assignee: task.assignee } : undefined;
  return new HttpError(statusFor[reason.code], reason.code, reason.message, details);
}

/** Loads the task for a request and checks the caller may do `permission` to it (404 across tenants). */
async function authorizedTask(ctx: ServiceContext<TaskSvcConfig>, request: FastifyRequest, taskId: TaskId, permission: Permission): Promise<TaskRecord> {
  const task = await loadTask(ctx.pool, taskId);
  if (!task) throw new HttpError(404, 'TASK_NOT_FOUND', `task ${taskId} does not exist`);
  guard(request, permission, task.projectId, taskNotFound(taskId));
  return task;
}

/** A body's actor must be the caller: no one acts in someone else's name. */
export function actorMustBeCaller(request: FastifyRequest, named: string | undefined, field: string): void {
  if (named !== undefined && named !== request.principal.subject) throw new HttpError(403, 'ACTOR_MISMATCH', `${field} must be the caller (${request.principal.subject}); leave it out`);
}

/** The assignee is shown to the assignee and to whoever may see people (managers, owners, admins). */
export const toView = (t: TaskRecord, request: FastifyRequest) => ({
  taskId: t.taskId,
  projectId: t.projectId,
  title: t.title,
  dataUri: t.dataUri,
  taskNumber: t.taskNumber,
  status: t.status,
  attempt: t.attempt,
  // Omitted, not null (null means unassigned), when the caller may not see who holds the task.
  ...(t.assignee === null || t.assignee === request.principal.subject || can(request.principal, Permission.peopleRead, t.projectId) ? { assignee: t.assignee } : {}),
  leaseExpiresAt: t.leaseExpiresAt,
  reason: t.reason,
  version: t.version,
  createdAt: t.createdAt.toISOString(),
  updatedAt: t.updatedAt.toISOString(),
});

export function taskRoutes(app: FastifyInstance, ctx: ServiceContext<TaskSvcConfig>): void {
  /**
   * Runs a command once per Idempotency-Key: the task's new state, its events (caused by the key)
   * and the stored response commit together. A rejection is thrown, so it is not stored and a
   * corrected retry with the same key runs.
   */
  const numbers = createSegmentAllocator({ pool: ctx.pool, segmentSize: 100 });
  type Command = Extract<TaskCommand, { taskId: TaskId }>;
  const run = (request: FastifyRequest, options: IdempotentOptions, make: Command | ((tx: PoolClient) => Promise<Command>), status = 200) =>
    request.idempotent(options, async (tx, key) => {
      const command = typeof make === 'function' ? await make(tx) : make;
      const seen: TaskSeen = {};
      const result = await executeTask(tx, command, seen);
      if (!result.ok) throw rejection(result.reason, request, seen.record ?? null);
      await ctx.emit(tx, result.events, key, ctx.signals.notification([command.taskId]));
      if (!seen.record) throw new HttpError(404, 'TASK_NOT_FOUND', `task ${command.taskId} does not exist`);
      return { status, body: toView(seen.record, request) };
    });

  app.post('/tasks', async (request) => {
    const body = parseInput(CreateTaskBody, request.body);
    guard(request, Permission.taskCreate, body.projectId, { code: 'PROJECT_NOT_FOUND', message: `project ${body.projectId} does not exist` });
    const { projectKey, ...fields } = body;
    // Drawn before the transaction opens: fetching the next segment needs a connection of its own,
    // and requests that each held one while waiting for another would starve the pool under load.
    // A number drawn by a request that then fails or is replayed is skipped: gaps, never duplicates.
    // Only for a request that will run: without a valid Idempotency-Key it is answered 400 below,
    // and must not cost the project a number (nor a segment's write).
    const key = request.headers['idempotency-key'];
    const number = key === undefined || !checkIdempotencyKey(key).ok ? 0 : await numbers.next(body.projectId);
    const create = async (tx: PoolClient): Promise<Command> => {
      const registered = await projectKeyFor(tx, body.projectId, projectKey, DEFAULT_PROJECT_KEY);
      if ('conflict' in registered) throw new HttpError(409, 'PROJECT_KEY_MISMATCH', `project ${body.projectId} numbers its tasks as ${registered.conflict}, not ${projectKey}`);
      const taskNumber = formatTaskNumber(registered.key, number);
      return { type: 'CreateTask', taskId: (await ctx.nextId()) as TaskId, ...fields, taskNumber, createdBy: request.principal.subject };
    };
    return run(request, { required: true, project: body.projectId, input: body }, create, 201);
  });

  app.post('/tasks/:taskId/claim', async (request) => {
    const { taskId } = parseInput(TaskParams, request.params, 'path');
    const body = parseInput(ClaimBody, request.body);
    const task = await authorizedTask(ctx, request, taskId, Permission.taskClaim);
    actorMustBeCaller(request, body?.annotatorId, 'annotatorId');
    const annotatorId = request.principal.subject as AnnotatorId;
    // The right that shows other people's labels of the task (label-svc's labels read).
    const readsOthersWork = can(request.principal, Permission.reviewDecide, task.projectId);
    // The clock is read once the key is claimed, not before a wait on Redis or on the key: the
    // lease runs from when the claim is decided.
    // No body, `{}` and the caller's own annotatorId are one claim.
    return run(request, { input: { taskId, annotatorId } }, async () => ({ type: 'ClaimTask', taskId, annotatorId, now: ctx.now(), leaseMs: ctx.config.ASSIGNMENT_LEASE_MS, readsOthersWork }));
  });

  app.post('/tasks/:taskId/cancel', async (request) => {
    const { taskId } = parseInput(TaskParams, request.params, 'path');
    const { reason } = parseInput(CancelBody, request.body);
    await authorizedTask(ctx, request, taskId, Permission.taskCancel);
    return run(request, { input: { taskId, reason } }, { type: 'CancelTask', taskId, reason, cancelledBy: request.principal.subject });
  });

  // A long poll: with conditions and Prefer: wait, the answer waits until the task meets them (its
  // status follows other services' events) or the wait is over; the client checks which.
  app.get('/tasks/:taskId', async (request, reply) => {
    const { taskId } = parseInput(TaskParams, request.params, 'path');
    const conditions = parseInput(WaitConditions, request.query, 'query');
    const conditional = conditions.status !== undefined || conditions.minAttempt !== undefined;
    const task = await awaitTask({
      signals: ctx.signals,
      taskId,
      waitMs: conditional ? honourPreferWait(request, reply, ctx.longPolls) : undefined,
      recheckMs: ctx.longPolls.recheckMs,
      abort: clientGone(reply),
      metrics: ctx.metrics,
      route: 'GET /tasks/:taskId',
      attempt: async () => {
        const found = await loadTask(ctx.pool, taskId);
        if (!found) throw new HttpError(404, 'TASK_NOT_FOUND', `task ${taskId} does not exist`);
        guard(request, Permission.taskRead, found.projectId, taskNotFound(taskId));
        return found;
      },
      settled: (found) => matches(found, conditions),
    });
    return toView(task, request);
  });

  // Only the caller's projects: a project named in the query that the caller has no part in is 404.
  app.get('/tasks', async (request) => {
    const { projectId, status, limit, cursor } = parseInput(ListQuery, request.query, 'query');
    const { principal } = request;
    if (projectId && !canSeeProject(principal, projectId)) throw new HttpError(404, 'PROJECT_NOT_FOUND', `project ${projectId} does not exist`);
    const projectIds = projectId ? [projectId] : principal.admin ? 'all' : projectsWith(principal, Permission.taskRead);
    const after = cursor === undefined ? undefined : decodeCursor(TaskListPosition, cursor);
    const { items, next } = await listTasks(ctx.pool, { projectIds, ...(status ? { status } : {}), limit, ...(after ? { after } : {}) });
    return { tasks: items.map((t) => toView(t, request)), nextCursor: next === null ? null : encodeCursor(next) };
  });
}
