import { ConfigResourceTypes } from 'kafkajs';
import { afterAll, describe, expect, inject, it } from 'vitest';
import { captureLogs, uniqueName } from '@labelflow/testing';
import { createKafka, ensureTopics } from './index';

const infra = inject('infra');
const kafka = createKafka({ brokers: infra.kafkaBrokers.split(','), clientId: 'topics-test', logger: captureLogs({ service: 'topics-test' }).logger });
const admin = kafka.admin();
afterAll(() => admin.disconnect());

/** The topic's `retention.ms` as the broker reports it, and whether that is the topic's own setting. */
async function retentionOf(topic: string): Promise<{ value: string | undefined; own: boolean }> {
  await admin.connect();
  const { resources } = await admin.describeConfigs({ resources: [{ type: ConfigResourceTypes.TOPIC, name: topic, configNames: ['retention.ms'] }], includeSynonyms: false });
  const entry = resources[0]?.configEntries.find((e) => e.configName === 'retention.ms');
  return { value: entry?.configValue, own: entry?.isDefault === false };
}

describe('creating topics', () => {
  it('creates a missing topic with the settings given for it, and leaves an existing one as it is', async () => {
    const kept = uniqueName('topics-kept');
    const plain = uniqueName('topics-plain');
    await ensureTopics(kafka, [kept, plain], 1, { configs: { [kept]: { 'retention.ms': '2592000000' } } });
    expect(await retentionOf(kept)).toEqual({ value: '2592000000', own: true });
    expect((await retentionOf(plain)).own).toBe(false);

    // Another start with other settings: the topic exists, so nothing changes it.
    await ensureTopics(kafka, [kept], 1, { configs: { [kept]: { 'retention.ms': '60000' } } });
    expect(await retentionOf(kept)).toEqual({ value: '2592000000', own: true });
  });

  it('creates topics with the replication factor given, which a one-broker cluster refuses above 1', async () => {
    const topic = uniqueName('topics-replicated');
    const refused = await ensureTopics(kafka, [topic], 1, { replicationFactor: 2, timeoutMs: 5_000 }).then(
      () => undefined,
      (error: unknown) => error,
    );
    expect(JSON.stringify(refused)).toMatch(/INVALID_REPLICATION_FACTOR/);
    await ensureTopics(kafka, [topic], 1, { replicationFactor: 1 });
    await admin.connect();
    const { topics } = await admin.fetchTopicMetadata({ topics: [topic] });
    expect(topics[0]?.partitions[0]?.replicas).toHaveLength(1);
  });
});
