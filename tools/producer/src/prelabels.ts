// `--prelabels R` with `--import N`: a model worker's part. For a share R of the imported tasks it
// publishes one PrelabelProposed each on `<prefix>.prelabels` (a share of them a second time, byte
// for byte), annotators claim those tasks (so label-svc learns the assignment and shows the
// proposal with the task), and the run waits until label-svc's API lists exactly one proposal per
// task, the model's.
import { Kafka, logLevel, Partitioners } from 'kafkajs';
import { fixKafkajsIdleLoop, kafkajsSecurity } from '@labelflow/messaging';
import { buildPrelabelProposed, inputTopicName, prelabelMessage } from '@labelflow/contracts';
import { client, errorCode, type Call } from './http';
import type { Actor } from './identity';
import type { KafkaTarget } from './kafka-target';
import { seededRandom } from './random';

export interface PrelabelRunOptions {
  readonly urls: { readonly task: string; readonly label: string };
  readonly kafka: KafkaTarget;
  readonly projectId: string;
  /** Reads the task list and the proposals: a manager of the project. */
  readonly manager: Actor;
  /** Claim the chosen tasks, in turn. */
  readonly annotators: readonly Actor[];
  /** Share of the project's tasks that get a proposal. */
  readonly share: number;
  /** Share of the proposals published a second time, byte for byte. */
  readonly duplicates: number;
  readonly seed: number;
  readonly timeoutMs: number;
  readonly concurrency: number;
  readonly onProgress?: (done: number, total: number) => void;
}

export interface PrelabelRunSummary {
  readonly tasks: number;
  readonly proposals: number;
  readonly duplicatesSent: number;
  /** Tasks whose proposal label-svc lists, once. */
  readonly stored: number;
  readonly ms: number;
  readonly problems: readonly string[];
}

export const PRODUCE_MODEL = { name: 'produce-model', version: '1' } as const;

/** Every task id of the project, page by page (the list is keyset-paginated). */
async function projectTaskIds(task: Call, projectId: string): Promise<string[]> {
  const ids: string[] = [];
  let cursor: string | null = null;
  do {
    const res: { status: number; body: { tasks?: { taskId: string }[]; nextCursor?: string | null } } = await task('GET', `/tasks?projectId=${projectId}&limit=1000${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`);
    if (res.status !== 200) throw new Error(`listing the project's tasks answered ${res.status} ${JSON.stringify(res.body)}`);
    for (const t of res.body.tasks ?? []) ids.push(t.taskId);
    cursor = res.body.nextCursor ?? null;
  } while (cursor);
  return ids;
}

async function pool<T>(items: readonly T[], concurrency: number, work: (item: T, i: number) => Promise<void>): Promise<void> {
  let next = 0;
  await Promise.all(
    Array.from({ length: Math.min(concurrency, items.length) }, async () => {
      while (next < items.length) {
        const i = next++;
        await work(items[i] as T, i);
      }
    }),
  );
}

export async function runPrelabels(o: PrelabelRunOptions): Promise<PrelabelRunSummary> {
  const t0 = Date.now();
  const deadline = t0 + o.timeoutMs;
  const manager = client(o.urls.task, { authorization: o.manager.authorization });
  const random = seededRandom(o.seed ^ 0x9e3779b9);
  const chosen = (await projectTaskIds(manager, o.projectId)).filter(() => random() < o.share);
  const problems: string[] = [];

  // Publish: one proposal per chosen task, keyed by task id; the chosen duplicates go out again.
  fixKafkajsIdleLoop();
  const kafka = new Kafka({ clientId: 'labelflow-produce-prelabels', brokers: [...o.kafka.brokers], ...kafkajsSecurity(o.kafka.security), logLevel: logLevel.NOTHING });
  const producer = kafka.producer({ idempotent: true, maxInFlightRequests: 1, allowAutoTopicCreation: false, createPartitioner: Partitioners.DefaultPartitioner });
  const topic = inputTopicName(o.kafka.topicPrefix, 'prelabels');
  let duplicatesSent = 0;
  await producer.connect();
  try {
    const messages = chosen.map((taskId, i) =>
      prelabelMessage(
        buildPrelabelProposed({
          id: `produce-${o.seed}-${taskId}`,
          taskId,
          projectId: o.projectId,
          attempt: 1,
          model: PRODUCE_MODEL,
          annotations: [{ label: i % 2 === 0 ? 'cat' : 'dog', confidence: 0.5 + (i % 50) / 100 }],
        }),
      ),
    );
    const again = messages.filter(() => random() < o.duplicates);
    duplicatesSent = again.length;
    const all = [...messages, ...again];
    for (let at = 0; at < all.length; at += 1_000) await producer.send({ topic, acks: -1, messages: all.slice(at, at + 1_000).map((m) => ({ key: m.key, value: m.value, headers: { ...m.headers } })) });
  } finally {
    await producer.disconnect();
  }

  // Claim: label-svc shows a task's proposals once it knows who works on it.
  const claimers = o.annotators.map((a) => client(o.urls.task, { authorization: a.authorization }));
  await pool(chosen, o.concurrency, async (taskId, i) => {
    const res = await (claimers[i % claimers.length] as Call)('POST', `/tasks/${taskId}/claim`, {});
    if (res.status !== 200) problems.push(`claim of task ${taskId} answered ${res.status} ${errorCode(res.body) ?? JSON.stringify(res.body)}`);
  });

  // Wait, per task, until label-svc lists the proposal (it may come before or after the assignment).
  const label = client(o.urls.label, { authorization: o.manager.authorization });
  let stored = 0;
  let done = 0;
  await pool(chosen, o.concurrency, async (taskId) => {
    for (let delay = 25; ; delay = Math.min(delay * 2, 1_000)) {
      const res = await label<{ prelabels?: { model: { name: string; version: string } }[] }>('GET', `/tasks/${taskId}/prelabels`);
      const listed = res.status === 200 ? (res.body.prelabels ?? []) : [];
      if (listed.length > 0) {
        if (listed.length !== 1 || listed[0]?.model.name !== PRODUCE_MODEL.name || listed[0]?.model.version !== PRODUCE_MODEL.version) {
          problems.push(`task ${taskId}: label-svc lists ${listed.length} proposals ${JSON.stringify(listed.map((p) => p.model))}, expected the one of ${PRODUCE_MODEL.name}@${PRODUCE_MODEL.version}`);
        } else stored++;
        break;
      }
      // 404 TASK_NOT_FOUND: the assignment has not reached label-svc yet; 200 with none: the proposal has not.
      if (res.status !== 200 && !(res.status === 404 && errorCode(res.body) === 'TASK_NOT_FOUND')) {
        problems.push(`task ${taskId}: GET /tasks/${taskId}/prelabels answered ${res.status} ${JSON.stringify(res.body)}`);
        break;
      }
      if (Date.now() > deadline) {
        problems.push(`task ${taskId}: no proposal listed by label-svc within the run's --timeout-s`);
        break;
      }
      await new Promise((r) => setTimeout(r, delay));
    }
    o.onProgress?.(++done, chosen.length);
  });
  return { tasks: chosen.length, proposals: chosen.length, duplicatesSent, stored, ms: Date.now() - t0, problems };
}
