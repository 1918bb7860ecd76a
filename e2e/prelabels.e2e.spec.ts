import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { buildPrelabelProposed, inputTopicName, prelabelMessage, type PrelabelProposalInput } from '@labelflow/contracts';
import { as, consumerLag, eventually, metricValue, produceRaw, queryRows, readTopic, tokenFor, type TestIdentity, type TestStack, startStack } from '@labelflow/testing';
import { expectAuditClean } from './audit';
import { claim, createTask, key, labelsView, review, submitLabels, waitForStatus } from './saga';

const MODEL = { name: 'cat-detector', version: '2.1' } as const;
const MACHINE = 'model.cat-detector@2.1';
const BUDGET = 10_000;
const PRICE = 500;
const MACHINE_PRICE = 70;

interface PrelabelsView {
  readonly attempt: number;
  readonly truncated: boolean;
  readonly prelabels: readonly { readonly proposalId: string; readonly model: { name: string; version: string }; readonly annotations: readonly { label: string; confidence: number }[]; readonly autoSubmitted: boolean }[];
}

describe('machine pre-labels', () => {
  let stack: TestStack;
  let projectId: string;
  let topic: string;
  const infra = inject('infra');

  /** What model workers do: publish proposals on the input topic, keyed by task id, as the contract builds them. */
  const publish = (...proposals: readonly (PrelabelProposalInput | { readonly raw: string; readonly taskId: string })[]) =>
    produceRaw(
      infra.kafkaBrokers,
      topic,
      proposals.map((p) => ('raw' in p ? { key: p.taskId, value: p.raw, headers: { 'event-type': 'PrelabelProposed', 'event-version': '1' } } : { ...prelabelMessage(buildPrelabelProposed(p)) })),
    );
  const proposal = (taskId: string, attempt: number, id: string, confidence = 0.95, model: { name: string; version: string } = MODEL): PrelabelProposalInput => ({
    id,
    taskId,
    projectId,
    attempt,
    model,
    annotations: [{ label: 'cat', confidence }, { label: 'whiskers', confidence: Math.min(1, confidence + 0.01) }],
  });
  /** label-svc has consumed every proposal published so far (committed offsets at the end of the topic). */
  const prelabelsConsumed = () => eventually(async () => expect(await consumerLag(infra.kafkaBrokers, stack.groupOf('label-svc'), [topic])).toBe(0), { timeoutMs: 30_000 });
  const stored = async (taskId: string) => queryRows<{ attempt: number; model_name: string; model_version: string; proposal_id: string }>(stack.databases['label-svc'], 'SELECT attempt, model_name, model_version, proposal_id FROM prelabels WHERE task_id = $1 ORDER BY model_name', [taskId]);
  const manager = () => as.manager('manager-1', projectId);
  const prelabelsOf = (taskId: string, identity: TestIdentity = manager()) => stack.http('label-svc', identity).get<PrelabelsView>(`/tasks/${taskId}/prelabels`);
  /** label-svc has learnt the task's assignment (of this attempt) from task-svc. */
  const assignmentKnown = (taskId: string, attempt: number) =>
    eventually(async () => expect((await labelsView(stack, taskId)).assignment?.attempt).toBe(attempt));
  const putPolicy = async (identity: TestIdentity, body: unknown) => {
    const res = await fetch(`${stack.processes['label-svc'].url}/projects/${projectId}/prelabel-policy`, {
      method: 'PUT',
      headers: { authorization: `Bearer ${await tokenFor(identity)}`, 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });
    return { status: res.status, body: (await res.json()) as Record<string, unknown> };
  };

  beforeAll(async () => {
    stack = await startStack(infra);
    topic = inputTopicName(stack.prefix, 'prelabels');
    const res = await stack.http('billing-svc').post<{ projectId: string; machinePricePerTask: number }>('/projects', { name: 'pre-labelled', budget: BUDGET, pricePerTask: PRICE, machinePricePerTask: MACHINE_PRICE }, key());
    expect(res.status, JSON.stringify(res.body)).toBe(201);
    expect(res.body.machinePricePerTask).toBe(MACHINE_PRICE);
    projectId = res.body.projectId;
  });
  afterAll(async () => stack?.stop());

  it('stores a proposal delivered three times once, and shows it to the assignee and the managers only', async () => {
    const taskId = await createTask(stack, projectId);
    await claim(stack, taskId, 'annotator-a');
    await assignmentKnown(taskId, 1);
    const first = proposal(taskId, 1, 'p-1');
    // The same proposal three times (a worker's retries), once more under a new id, and another model's once.
    await publish(first, first, first, { ...first, id: 'p-1-retry' }, proposal(taskId, 1, 'p-2', 0.5, { name: 'dog-detector', version: '1' }));
    await prelabelsConsumed();

    expect((await stored(taskId)).map((r) => [r.attempt, r.model_name, r.model_version, r.proposal_id])).toEqual([
      [1, 'cat-detector', '2.1', 'p-1'],
      [1, 'dog-detector', '1', 'p-2'],
    ]);
    const seen = await prelabelsOf(taskId);
    expect(seen.status, JSON.stringify(seen.body)).toBe(200);
    expect(seen.body.prelabels.map((p) => [p.model.name, p.autoSubmitted])).toEqual([['cat-detector', false], ['dog-detector', false]]);
    expect(seen.body.truncated).toBe(false);
    // Bounded to the latest: a worker that stamps a build id in each version makes as many as it likes.
    const latest = await stack.http('label-svc', manager()).get<PrelabelsView>(`/tasks/${taskId}/prelabels?limit=1`);
    expect([latest.body.truncated, latest.body.prelabels.map((p) => p.model.name)]).toEqual([true, ['dog-detector']]);
    expect((await stack.http('label-svc', manager()).get(`/tasks/${taskId}/prelabels?limit=0`)).status).toBe(400);
    expect((await prelabelsOf(taskId, as.annotator('annotator-a', projectId))).status).toBe(200);
    expect((await prelabelsOf(taskId, as.annotator('annotator-b', projectId))).status).toBe(403);
    const metrics = await stack.metrics('label-svc');
    expect(metricValue(metrics, 'consumer_messages_total', { type: 'PrelabelProposed', outcome: 'applied' })).toBe(2);
    expect(metricValue(metrics, 'consumer_messages_total', { type: 'PrelabelProposed', outcome: 'duplicate' })).toBe(3);
    await expectAuditClean(stack, infra.kafkaBrokers);
  });

  it('dead-letters a malformed proposal and applies its neighbours on the same partition', async () => {
    const taskId = await createTask(stack, projectId);
    await claim(stack, taskId, 'annotator-c');
    await assignmentKnown(taskId, 1);
    const malformed = JSON.stringify({ ...buildPrelabelProposed(proposal(taskId, 1, 'p-bad', 0.9, { name: 'bad-model', version: '1' })), annotations: [{ label: 'cat' }] });
    await publish(proposal(taskId, 1, 'p-before', 0.9, { name: 'model-a', version: '1' }), { raw: malformed, taskId }, proposal(taskId, 1, 'p-after', 0.9, { name: 'model-b', version: '1' }));

    const dlq = await readTopic(infra.kafkaBrokers, `${stack.prefix}.label-svc.dlq`, (m) => m.length >= 1);
    expect(dlq.map((m) => m.headers?.['dlq-error-code']?.toString())).toEqual(['MESSAGING_SCHEMA_INVALID']);
    expect(dlq[0]!.headers?.['dlq-source-topic']?.toString()).toBe(topic);
    expect(dlq[0]!.value?.toString()).toBe(malformed);
    await prelabelsConsumed();
    expect((await stored(taskId)).map((r) => r.proposal_id)).toEqual(['p-before', 'p-after']);
    await expectAuditClean(stack, infra.kafkaBrokers);
  });

  it('ignores a proposal for a superseded attempt and counts it', async () => {
    const taskId = await createTask(stack, projectId);
    await claim(stack, taskId, 'annotator-d');
    await submitLabels(stack, taskId, 'annotator-d');
    await review(stack, taskId, 'reject', 'not a cat');
    await assignmentKnown(taskId, 2);
    const before = metricValue(await stack.metrics('label-svc'), 'prelabels_ignored_total', { reason: 'STALE_ATTEMPT' });
    await publish(proposal(taskId, 1, 'p-late'));
    await prelabelsConsumed();

    expect(await stored(taskId)).toEqual([]);
    expect(metricValue(await stack.metrics('label-svc'), 'prelabels_ignored_total', { reason: 'STALE_ATTEMPT' })).toBe(before + 1);
    await expectAuditClean(stack, infra.kafkaBrokers);
  });

  it('submits a confident proposal as the model, which the attempt\'s holder may not review, and which completes through QA and billing: no payout, the machine price charged', async () => {
    expect((await putPolicy(as.annotator('annotator-e', projectId), { autoSubmit: true, minConfidence: 0.9 })).status).toBe(403);
    const set = await putPolicy(manager(), { autoSubmit: true, minConfidence: 0.9, model: MODEL });
    expect(set.status, JSON.stringify(set.body)).toBe(200);
    expect(set.body).toMatchObject({ projectId, autoSubmit: true, minConfidence: 0.9, model: MODEL, updatedBy: 'manager-1' });
    expect((await stack.http('label-svc', manager()).get(`/projects/${projectId}/prelabel-policy`)).body).toMatchObject({ autoSubmit: true, minConfidence: 0.9 });
    const balance = async () => (await stack.http('billing-svc').get<{ balance: number }>(`/projects/${projectId}`)).body.balance;
    const balanceBefore = await balance();

    const taskId = await createTask(stack, projectId);
    await claim(stack, taskId, 'annotator-e');
    await assignmentKnown(taskId, 1);
    // Below the threshold: kept and shown, not submitted. Then a confident one, delivered twice.
    await publish(proposal(taskId, 1, 'p-unsure', 0.5, { name: 'cat-detector', version: '2.0' }));
    const confident = proposal(taskId, 1, 'p-sure', 0.95);
    await publish(confident, confident);
    // The model labelled annotator-e's attempt: holding the reviewer role too, she still may not judge it.
    const holder: TestIdentity = { user: 'annotator-e', projects: { [projectId]: ['annotator', 'reviewer'] } };
    const ownAttempt = await stack.http('qa-svc', holder).post<{ error: { code: string } }>(`/reviews/${taskId}`, { decision: 'approve' }, { prefer: 'wait=20' });
    expect([ownAttempt.status, ownAttempt.body.error?.code]).toEqual([403, 'SELF_REVIEW']);
    await review(stack, taskId, 'approve');
    await waitForStatus(stack, taskId, 'completed');

    // Accepted when label-svc's own consumer reads the QA verdict, which task-svc's completion does not wait for.
    await eventually(async () => {
      const labels = await stack.http('label-svc').get<{ labels: { attempt: number; annotatorId: string; status: string }[] }>(`/tasks/${taskId}/labels`);
      expect(labels.body.labels).toMatchObject([{ attempt: 1, annotatorId: MACHINE, status: 'accepted' }]);
    });
    expect((await prelabelsOf(taskId)).body.prelabels.map((p) => [p.model.version, p.autoSubmitted])).toEqual([['2.0', false], ['2.1', true]]);
    const ledger = await queryRows<{ kind: string; amount: string; annotator_id: string | null }>(stack.databases['billing-svc'], 'SELECT kind, amount, annotator_id FROM ledger WHERE task_id = $1 ORDER BY id', [taskId]);
    expect(ledger.map((e) => [e.kind, Number(e.amount), e.annotator_id])).toEqual([['debit', MACHINE_PRICE, null]]);
    expect(await queryRows(stack.databases['billing-svc'], 'SELECT * FROM payouts WHERE annotator_id = $1', [MACHINE])).toEqual([]);
    expect(await balance()).toBe(balanceBefore - MACHINE_PRICE);
    // A person whose token names a model can neither claim nor label under that name: billing would
    // pay nobody for it, and a claim no labels can follow would hold the task for a whole lease.
    const impostorTask = await createTask(stack, projectId);
    const impostor = as.annotator(MACHINE, projectId);
    const claimed = await stack.http('task-svc', impostor).post<{ error: { code: string } }>(`/tasks/${impostorTask}/claim`, {});
    expect([claimed.status, claimed.body.error.code]).toEqual([403, 'MACHINE_ACTOR_RESERVED']);
    const refused = await stack.http('label-svc', impostor).post<{ error: { code: string } }>(`/tasks/${impostorTask}/labels`, { annotations: [{ label: 'cat' }] });
    expect([refused.status, refused.body.error.code]).toEqual([403, 'MACHINE_ACTOR_RESERVED']);
    await prelabelsConsumed();
    await expectAuditClean(stack, infra.kafkaBrokers);
  });
});
