import { Admin } from '@platformatic/kafka';
import { afterAll, describe, expect, inject, it } from 'vitest';
import { captureLogs, produceRaw, uniqueName } from '@labelflow/testing';
import { createKafka, createOffsetsReader, ensureTopics, kafkajsOffsets } from './index';

const infra = inject('infra');
const brokers = infra.kafkaBrokers.split(',');
const { logger } = captureLogs({ service: 'offsets-reader-test', level: 'error' });
const kafka = createKafka({ brokers, clientId: 'offsets-reader-test', logger });

const messages = (partition: number, n: number) => Array.from({ length: n }, (_, i) => ({ key: `k${i}`, value: `v${i}`, partition }));

describe('the offsets reader (createOffsetsReader)', () => {
  const reader = createOffsetsReader({ brokers, clientId: uniqueName('offsets-reader') });
  const admin = kafka.admin();
  // Commits offsets for a group in one request; kafkajs's setOffsets takes 5 s a call.
  const committer = new Admin({ clientId: uniqueName('offsets-committer'), bootstrapBrokers: brokers });
  afterAll(async () => {
    await reader.close();
    await committer.close();
    await admin.disconnect();
  });

  /** Two topics with known high watermarks, log starts and a group's commits on some partitions. */
  const seeded = async () => {
    await admin.connect();
    const a = uniqueName('offsets-a');
    const b = uniqueName('offsets-b');
    await ensureTopics(kafka, [a], 3);
    await ensureTopics(kafka, [b], 2);
    await produceRaw(infra.kafkaBrokers, a, [...messages(0, 5), ...messages(1, 2)]);
    await produceRaw(infra.kafkaBrokers, b, messages(0, 4));
    await admin.fetchTopicMetadata({ topics: [a, b] }); // kafkajs's deleteTopicRecords needs them loaded
    // Retention's effect on b/0: its log now starts at 2.
    await admin.deleteTopicRecords({ topic: b, partitions: [{ partition: 0, offset: '2' }] });
    const groupId = uniqueName('offsets-group');
    await committer.alterConsumerGroupOffsets({
      groupId,
      topics: [
        { name: a, partitionOffsets: [{ partition: 0, offset: 3n }] },
        { name: b, partitionOffsets: [{ partition: 0, offset: 4n }] },
      ],
    });
    return { a, b, groupId };
  };

  it('reads every partition high watermark, its log start when asked, and the group commits, -1 where it committed none', async () => {
    const { a, b, groupId } = await seeded();
    const withStarts = await reader.topicOffsets([a, b], true);
    expect(Object.fromEntries(withStarts.highs)).toEqual({ [`${a}/0`]: 5, [`${a}/1`]: 2, [`${a}/2`]: 0, [`${b}/0`]: 4, [`${b}/1`]: 0 });
    expect(Object.fromEntries(withStarts.lows!)).toEqual({ [`${a}/0`]: 0, [`${a}/1`]: 0, [`${a}/2`]: 0, [`${b}/0`]: 2, [`${b}/1`]: 0 });
    const without = await reader.topicOffsets([a, b], false);
    expect(without.lows).toBeUndefined();
    expect(without.highs).toEqual(withStarts.highs);
    const committed = await reader.committedOffsets(groupId, [a, b]);
    expect(Object.fromEntries(committed)).toEqual({ [`${a}/0`]: 3, [`${a}/1`]: -1, [`${a}/2`]: -1, [`${b}/0`]: 4, [`${b}/1`]: -1 });
  });

  it('reads the same offsets as the kafkajs admin it replaces', async () => {
    const { a, b, groupId } = await seeded();
    const viaKafkajs = kafkajsOffsets(admin);
    const [mine, theirs] = [await reader.topicOffsets([a, b], true), await viaKafkajs.topicOffsets([a, b], true)];
    expect(mine.highs).toEqual(theirs.highs);
    expect(mine.lows).toEqual(theirs.lows);
    expect(await reader.committedOffsets(groupId, [a, b])).toEqual(await viaKafkajs.committedOffsets(groupId, [a, b]));
  });

  it('sees messages produced after its partition lists were cached', async () => {
    const { a } = await seeded();
    expect((await reader.topicOffsets([a], false)).highs.get(`${a}/2`)).toBe(0);
    await produceRaw(infra.kafkaBrokers, a, messages(2, 3));
    expect((await reader.topicOffsets([a], false)).highs.get(`${a}/2`)).toBe(3);
  });

  it('fails, and does not hang, for a topic the cluster does not have', async () => {
    await expect(reader.topicOffsets([uniqueName('offsets-missing')], false)).rejects.toThrow();
  });
});
