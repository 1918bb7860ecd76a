import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { listDeadLetters } from '@labelflow/dlq';
import { createKafka } from '@labelflow/messaging';
import { createLogger } from '@labelflow/telemetry';
import { eventually, queryRows, startStack, type TestStack } from '@labelflow/testing';
import { expectAuditClean } from './audit';
import { claim, createProject, createTask, review, submitLabels, waitForStatus } from './saga';

const run = promisify(execFile);

describe('dead letters you can act on', () => {
  let stack: TestStack;
  const infra = inject('infra');
  // qa-svc gives up quickly, so the test sees the dead letter in seconds.
  beforeAll(async () => {
    stack = await startStack(infra, { 'qa-svc': { CONSUMER_MAX_ATTEMPTS: '2', CONSUMER_RETRY_INITIAL_MS: '50', CONSUMER_RETRY_MAX_MS: '100' } });
  });
  afterAll(async () => stack?.stop());

  const dlq = (...args: string[]) =>
    run('npx', ['tsx', 'tools/dlq/src/cli.ts', ...args, '--service', 'qa-svc'], { env: { ...process.env, KAFKA_BROKERS: infra.kafkaBrokers, KAFKA_TOPIC_PREFIX: stack.prefix } });

  it('lists an event a bug dead-lettered, and after the fix replays it once, however often it is replayed', async () => {
    // The "bug": qa-svc cannot write any review. A constraint violation is not transient, so the
    // LabelSubmitted that needs the write is dead-lettered after its attempts.
    await queryRows(stack.databases['qa-svc'], 'ALTER TABLE reviews ADD CONSTRAINT lf_test_bug CHECK (attempt < 0) NOT VALID');
    const projectId = await createProject(stack, 1_000, 100);
    const taskId = await createTask(stack, projectId);
    await claim(stack, taskId, 'ann-dlq');
    await submitLabels(stack, taskId, 'ann-dlq');

    const kafka = createKafka({ brokers: infra.kafkaBrokers.split(','), clientId: 'e2e-dlq', logger: createLogger({ service: 'e2e', level: 'warn' }) });
    const [letter] = await eventually(async () => {
      const letters = await listDeadLetters(kafka, `${stack.prefix}.qa-svc.dlq`);
      expect(letters).toHaveLength(1);
      return letters;
    }, { timeoutMs: 60_000, intervalMs: 500 });
    expect(letter).toMatchObject({ key: taskId, headers: { 'event-type': 'LabelSubmitted' }, source: { topic: `${stack.prefix}.label-events` } });
    expect(letter!.reason).toMatch(/lf_test_bug/);

    const listed = await dlq('list');
    expect(listed.stdout).toContain(`${letter!.id}`);
    expect(listed.stdout).toContain('LabelSubmitted');
    const shown = JSON.parse((await dlq('show', letter!.id)).stdout) as { value: { taskId: string } };
    expect(shown.value.taskId).toBe(taskId);

    // The fix, then the replay: the review opens. A second replay changes nothing.
    await queryRows(stack.databases['qa-svc'], 'ALTER TABLE reviews DROP CONSTRAINT lf_test_bug');
    expect((await dlq('replay', letter!.id)).stdout).toContain(`replayed ${letter!.id} to ${stack.prefix}.label-events`);
    await eventually(async () => expect((await stack.http('qa-svc').get(`/reviews/${taskId}`)).status).toBe(200), { timeoutMs: 30_000 });
    expect((await dlq('replay', '--all')).stdout).toContain('1 replayed');
    await stack.quiesce();
    const reviews = await queryRows<{ n: string }>(stack.databases['qa-svc'], 'SELECT count(*) AS n FROM reviews WHERE task_id = $1', [taskId]);
    expect(Number(reviews[0]?.n)).toBe(1);
    const started = await queryRows<{ n: string }>(stack.databases['qa-svc'], "SELECT count(*) AS n FROM outbox WHERE event_type = 'QaStarted' AND message_key = $1", [taskId]);
    expect(Number(started[0]?.n)).toBe(1);

    await review(stack, taskId, 'approve');
    await waitForStatus(stack, taskId, 'completed');
    await expectAuditClean(stack, infra.kafkaBrokers);
  });

  it('refuses an unknown letter and a malformed id with a clear message', async () => {
    const missing = await dlq('show', '0:999999').catch((e: { code: number; stderr: string }) => e);
    expect(missing).toMatchObject({ code: 1 });
    expect((missing as { stderr: string }).stderr).toContain('has no dead letter at 0:999999');
    const malformed = await dlq('replay', 'nope').catch((e: { code: number; stderr: string }) => e);
    expect(malformed).toMatchObject({ code: 2 });
    expect((malformed as { stderr: string }).stderr).toContain('partition:offset');
  });
});
