import type { FastifyInstance, FastifyRequest } from 'fastify';
import { z } from 'zod';
import { Permission, projectsWith } from '@labelflow/auth';
import { isConsumedType, storable, TaskId, type ProjectId } from '@labelflow/contracts';
import { guard, HttpError, parseInput, queryInt, withTransaction, type ServiceContext } from '@labelflow/service-kit';
import type { SagaMonitorConfig } from '../config';
import { deadLettersOf } from './dead-letters';
import { WatchRejections } from './decide';
import { dismissRecord } from './record';
import { findSaga, loadSagaForUpdate, overdueWatches, saveSagasMany, sagaEvents, sagaWatches, searchSagas, type EventDbRow, type SagaView, type StuckRow } from './repository';
import { WatchedStep } from './state';
import { causalOrder, describe, EventKind, kindOf } from './timeline';
import { pageSecurityPolicy, renderPage } from './ui';

const TaskParams = z.object({ taskId: TaskId });
const WatchParams = z.object({
  taskId: TaskId,
  step: z.enum(Object.values(WatchedStep) as [WatchedStep, ...WatchedStep[]]),
  attempt: z.coerce.number().int().min(1).max(1_000_000),
});
const SearchQuery = z.strictObject({
  /** A task id, or a task number such as PRJ-17 (any case). */
  search: storable(z.string().trim().min(1).max(64)).optional(),
  limit: queryInt(1, 200).default(50),
});
const AlertsQuery = z.strictObject({ limit: queryInt(1, 1000).default(200) });

/** An event id as the services stamp them (a Snowflake): anything else in a letter is its sender's text. */
const EVENT_ID = /^[1-9][0-9]{0,19}$/;

const sagaNotFound = (taskId: string) => ({ code: 'SAGA_NOT_FOUND', message: `no saga for task ${taskId} (yet)` });

/**
 * A timeline names everyone who worked on the task, so it is for those who may see people:
 * platform admins, and owners and managers of the task's project (docs/http-api.md).
 */
const VIEW = Permission.peopleRead;
const visibleProjects = (request: FastifyRequest) => (request.principal.admin ? 'all' : projectsWith(request.principal, VIEW));

const summary = (s: SagaView) => ({
  taskId: s.taskId,
  projectId: s.projectId,
  taskNumber: s.taskNumber,
  title: s.title,
  attempt: s.attempt,
  lastEventType: s.lastEventType,
  outcome: s.outcome,
  firstEventAt: s.firstEventAt,
  lastEventAt: s.lastEventAt,
  eventCount: s.events,
  duplicatesDropped: s.duplicatesDropped,
});

/** How each attempt went: when it ran, its events, and how it ended (reworked, or the saga's outcome). */
function attemptsOf(events: readonly EventDbRow[]) {
  const attempts = [...new Set(events.map((e) => e.attempt))].sort((a, b) => a - b);
  return attempts.map((attempt) => {
    const own = events.filter((e) => e.attempt === attempt);
    const reopen = events.find((e) => e.type === 'TaskReopened' && e.attempt === attempt + 1);
    const ending = [...own].reverse().find((e) => kindOf(e.type) === EventKind.outcome);
    // The list is in causal order, which a skewed clock can make differ from time order.
    const times = own.map((e) => e.occurred_at.getTime());
    return {
      attempt,
      startedAt: times.length > 0 ? new Date(Math.min(...times)).toISOString() : null,
      lastEventAt: times.length > 0 ? new Date(Math.max(...times)).toISOString() : null,
      events: own.length,
      ended: reopen ? `reopened: ${String(reopen.payload.reason)}` : ending ? ending.type : null,
    };
  });
}

const stuckView = (w: StuckRow) => ({
  taskId: w.task_id,
  projectId: w.project_id,
  taskNumber: w.task_number,
  title: w.title,
  step: w.step,
  attempt: w.attempt,
  since: w.since.toISOString(),
  dueAt: w.due_at.toISOString(),
  alerting: w.alerted_at !== null,
  alertedAt: w.alerted_at?.toISOString() ?? null,
  lastEventType: w.last_event_type,
});

export function sagaRoutes(app: FastifyInstance, ctx: ServiceContext<SagaMonitorConfig>): void {
  const traceUrl = (traceId: string | null) => (traceId && ctx.config.JAEGER_URL ? `${ctx.config.JAEGER_URL.replace(/\/+$/, '')}/trace/${traceId}` : null);
  const page = renderPage();
  const policy = pageSecurityPolicy(page);

  // The page holds no data: it asks for a token and sends it with every call below.
  app.get('/ui', async (_request, reply) => reply.type('text/html; charset=utf-8').header('cache-control', 'no-store').header('x-frame-options', 'DENY').header('content-security-policy', policy).send(page));

  app.get('/sagas/alerts', async (request) => {
    const { limit } = parseInput(AlertsQuery, request.query, 'query');
    const rows = await overdueWatches(ctx.pool, { projectIds: visibleProjects(request), now: ctx.now(), limit });
    return { alerts: rows.map(stuckView) };
  });

  app.get('/sagas', async (request) => {
    const { search, limit } = parseInput(SearchQuery, request.query, 'query');
    const sagas = await searchSagas(ctx.pool, { ...(search === undefined ? {} : { search }), projectIds: visibleProjects(request), limit });
    return { sagas: sagas.map(summary) };
  });

  app.get('/sagas/:taskId', async (request) => {
    const { taskId } = parseInput(TaskParams, request.params, 'path');
    const saga = await findSaga(ctx.pool, taskId);
    if (!saga) throw new HttpError(404, 'SAGA_NOT_FOUND', sagaNotFound(taskId).message);
    guard(request, VIEW, saga.projectId as ProjectId, sagaNotFound(taskId));
    const [byTime, watches, deadLetters] = await Promise.all([sagaEvents(ctx.pool, taskId), sagaWatches(ctx.pool, taskId), deadLettersOf(ctx.pool, taskId)]);
    const events = causalOrder(byTime, (e) => e.event_id, (e) => e.causation_id);
    return {
      ...summary(saga),
      attempts: attemptsOf(events),
      compensations: events.filter((e) => kindOf(e.type) === EventKind.compensation).length,
      events: events.map((e) => ({
        eventId: e.event_id,
        occurredAt: e.occurred_at.toISOString(),
        consumedAt: e.consumed_at.toISOString(),
        service: e.producer,
        type: e.type,
        version: e.version,
        attempt: e.attempt,
        kind: kindOf(e.type),
        details: describe(e.type, e.payload),
        causationId: e.causation_id,
        traceId: e.trace_id,
        traceUrl: traceUrl(e.trace_id),
        payload: e.payload,
      })),
      watches: watches.map((w) => ({ step: w.step, attempt: w.attempt, since: w.since, dueAt: w.dueAt, alerting: w.alertedAt !== null, alertedAt: w.alertedAt })),
      // What a service's consumer could not process; `npm run dlq -- replay` sends one back. The
      // reason is the consumer's error text (SQL, schema paths) and the coordinates are the DLQ's:
      // for the platform admins who run the replay, not for a project's people.
      // A letter's key and body are whatever its sender chose: one whose body names another
      // project is not this project's to see, and of the rest only what our own services wrote
      // (which service, the code, when) is shown as it is; the type only when the contracts know
      // it and the body names the project, the id only as an event id (a Snowflake).
      deadLetters: deadLetters
        .filter((d) => request.principal.admin || d.projectId === null || d.projectId === saga.projectId)
        .map((d) => {
          const vouched = request.principal.admin || d.projectId === saga.projectId;
          return {
            service: d.service,
            eventId: request.principal.admin || (vouched && d.eventId !== null && EVENT_ID.test(d.eventId)) ? d.eventId : null,
            eventType: request.principal.admin || (vouched && d.eventType !== null && isConsumedType(d.eventType)) ? d.eventType : null,
            code: d.code,
            failedAt: d.failedAt,
            ...(request.principal.admin ? { topic: d.topic, id: `${d.partition}:${d.offset}`, projectId: d.projectId, reason: d.reason, source: d.source } : {}),
          };
        }),
    };
  });

  // An alert whose event will never come (a dead letter given up, a row lost with a database)
  // would alert for good and hide the next one on its step: a platform admin ends it. The watch
  // closes as `dismissed` and its alert resolves, notice, metric and webhook alike.
  app.post('/sagas/:taskId/alerts/:step/:attempt/dismiss', async (request) => {
    if (!request.principal.admin) throw new HttpError(403, 'FORBIDDEN', 'dismissing an alert is for platform admins');
    const { taskId, step, attempt } = parseInput(WatchParams, request.params, 'path');
    const result = await withTransaction(ctx.pool, async (tx) => {
      const before = await loadSagaForUpdate(tx, taskId);
      if (!before) return { ok: false as const, reason: sagaNotFound(taskId) };
      const dismissed = dismissRecord(before, step, attempt, ctx.now().toISOString(), request.principal.subject);
      if (dismissed.ok) await saveSagasMany(tx, [{ before, after: dismissed.state }]);
      return dismissed;
    });
    if (!result.ok) {
      const status = result.reason.code === WatchRejections.WATCH_NOT_ALERTING ? 409 : 404;
      throw new HttpError(status, result.reason.code, result.reason.message);
    }
    ctx.logger.info({ taskId, step, attempt, by: request.principal.subject }, 'saga alert dismissed');
    return { dismissed: { taskId, step, attempt } };
  });
}
