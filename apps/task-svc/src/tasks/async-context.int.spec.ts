import { AsyncLocalStorage } from 'node:async_hooks';
import { randomUUID } from 'node:crypto';
import { afterAll, afterEach, beforeAll, describe, expect, inject, it, vi, type MockInstance } from 'vitest';
import { buildService, loadConfig, type BuiltService } from '@labelflow/service-kit';
import { as, buildTestService, queryRows, type InProcessService } from '@labelflow/testing';
import { TaskSvcConfig } from '../config';
import { taskService } from '../service';

const infra = inject('infra');
const project = randomUUID();
const manager = as.manager('mgr-async', project);
const traceparent = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01';

/*
 * On Node 20, once any AsyncLocalStorage has run, V8's promise hook taxes every promise of the
 * process. With tracing off and the nested-connection check off (production's defaults) a service
 * must never start one, yet a command's events must still continue its caller's trace.
 */
describe.each([
  { check: 'false', entersStorage: false },
  { check: 'true', entersStorage: true },
])('task-svc with DB_REFUSE_NESTED_CONNECTIONS=$check and tracing off', ({ check, entersStorage }) => {
  let svc: InProcessService<BuiltService<TaskSvcConfig>>;
  let runs: MockInstance;
  let entered: MockInstance;

  beforeAll(async () => {
    svc = await buildTestService(infra, 'task-svc', (env) => buildService(taskService, loadConfig(TaskSvcConfig, env)), { DB_REFUSE_NESTED_CONNECTIONS: check });
  });
  afterAll(async () => {
    await svc?.close();
  });
  afterEach(() => vi.restoreAllMocks());

  it(`${entersStorage ? 'enters' : 'never enters'} an AsyncLocalStorage for a command, whose event continues the caller's trace`, async () => {
    runs = vi.spyOn(AsyncLocalStorage.prototype, 'run');
    entered = vi.spyOn(AsyncLocalStorage.prototype, 'enterWith');
    const created = await svc.http(manager).post<{ taskId: string }>('/tasks', { projectId: project, title: 'cat?', dataUri: 's3://b/1.jpg' }, { 'idempotency-key': randomUUID(), traceparent });
    expect(created.status).toBe(201);

    const rows = await queryRows<{ headers: Record<string, string> }>(svc.databaseUrl, `SELECT headers FROM outbox_messages WHERE event_type = 'TaskCreated' AND message_key = $1`, [created.body.taskId]);
    expect(rows.map((r) => r.headers.traceparent)).toEqual([traceparent]);
    expect(runs.mock.calls.length + entered.mock.calls.length > 0).toBe(entersStorage);
  });

  it(`${entersStorage ? 'enters' : 'never enters'} an AsyncLocalStorage for a bulk import, whose tasks each start a trace of their own`, async () => {
    runs = vi.spyOn(AsyncLocalStorage.prototype, 'run');
    entered = vi.spyOn(AsyncLocalStorage.prototype, 'enterWith');
    const file = ['a', 'b', 'c'].map((id) => JSON.stringify({ externalId: id, title: `task ${id}`, dataUri: `s3://b/${id}.jpg` })).join('\n');
    const imported = await svc.http(manager).post<{ created: number }>(`/projects/${project}/tasks/import?importId=${randomUUID()}`, file, { 'content-type': 'application/x-ndjson', traceparent });
    expect(imported.status).toBe(200);
    expect(imported.body.created).toBe(3);

    const rows = await queryRows<{ headers: Record<string, string> }>(svc.databaseUrl, `SELECT headers FROM outbox_messages WHERE event_type = 'TaskCreated' AND payload->'payload'->>'externalId' IS NOT NULL`);
    // Not the upload's trace: a million sagas in one trace would be unreadable (see imports/execute.ts).
    expect(rows.map((r) => r.headers.traceparent)).toEqual([undefined, undefined, undefined]);
    expect(runs.mock.calls.length + entered.mock.calls.length > 0).toBe(entersStorage);
  });
});
