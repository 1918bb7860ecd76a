import { AssignerProtocol, Kafka, logLevel, type PartitionAssigner } from 'kafkajs';
import { createServedTopics } from '@labelflow/messaging';
import { eventually } from './eventually';
import { uniqueName } from './names';

const ROGUE_PROTOCOL = 'LabelflowTestForeignAssigner';

/** An assignor no labelflow consumer offers; it assigns nothing to anyone. */
const foreignAssigner: PartitionAssigner = () => ({
  name: ROGUE_PROTOCOL,
  version: 0,
  assign: async ({ members }) =>
    members.map(({ memberId }) => ({ memberId, memberAssignment: AssignerProtocol.MemberAssignment.encode({ version: 0, assignment: {}, userData: Buffer.alloc(0) }) })),
  protocol: ({ topics }) => ({ name: ROGUE_PROTOCOL, metadata: AssignerProtocol.MemberMetadata.encode({ version: 0, topics, userData: Buffer.alloc(0) }) }),
});

export interface HeldGroup {
  /** Leaves the group: members of the group's own kind can join it again. */
  release(): Promise<void>;
}

/**
 * Joins `groupId` the way another application misconfigured with the same group id would: with a
 * partition assignor no labelflow consumer supports. While it is the group's member, the broker
 * refuses every other member's JoinGroup with INCONSISTENT_GROUP_PROTOCOL, an error kafkajs does
 * not retry: the consumer crashes, and kafkajs does not restart it (`restart: false`). The broker
 * accepts it only into an empty group, so it tries again until the group is empty (a running
 * member must have left, or its session expired) or `timeoutMs` passed.
 */
export async function holdConsumerGroup(brokers: string, groupId: string, { timeoutMs = 30_000 } = {}): Promise<HeldGroup> {
  const kafka = new Kafka({ clientId: uniqueName('foreign-member'), brokers: brokers.split(','), logLevel: logLevel.NOTHING });
  // A topic of its own: holding the group must not consume (or commit) anything of the group's.
  const topic = uniqueName('foreign-member-topic');
  const admin = kafka.admin();
  await admin.connect();
  try {
    await createServedTopics(admin, [{ topic, numPartitions: 1 }]);
  } finally {
    await admin.disconnect();
  }
  const member = await eventually(
    async () => {
      const consumer = kafka.consumer({ groupId, partitionAssigners: [foreignAssigner], sessionTimeout: 30_000, maxWaitTimeInMs: 100, retry: { retries: 0 } });
      let joined = false;
      let crash: Error | undefined;
      consumer.on(consumer.events.GROUP_JOIN, () => void (joined = true));
      consumer.on(consumer.events.CRASH, ({ payload }) => void (crash = payload.error));
      // Every try that does not return its member disconnects it, whatever failed: a member left
      // connected would join late and hold the group for good.
      try {
        await consumer.connect();
        await consumer.subscribe({ topic });
        // Resolves once the member joined, or once the refused join crashed it.
        await consumer.run({ eachMessage: async () => undefined });
      } catch (error) {
        await consumer.disconnect().catch(() => undefined);
        throw error;
      }
      if (!joined) {
        await consumer.disconnect();
        throw new Error(`group ${groupId} is not empty: ${crash?.message ?? 'join refused'}`);
      }
      return consumer;
    },
    { timeoutMs, intervalMs: 250 },
  );
  return { release: () => member.disconnect() };
}

/** One member of a consumer group as the broker sees it: its client and the partitions it holds. */
export interface GroupMember {
  readonly clientId: string;
  readonly partitions: number;
}

/** The members of `groupId` and how many partitions each holds (empty while the group rebalances or is empty). */
export async function groupMembers(brokers: string, groupId: string): Promise<GroupMember[]> {
  const admin = new Kafka({ clientId: uniqueName('group-reader'), brokers: brokers.split(','), logLevel: logLevel.NOTHING }).admin();
  await admin.connect();
  try {
    const { groups } = await admin.describeGroups([groupId]);
    const group = groups[0];
    if (!group || group.state !== 'Stable') return [];
    return group.members.map((m) => {
      const decoded = m.memberAssignment.length > 0 ? AssignerProtocol.MemberAssignment.decode(m.memberAssignment) : null;
      const partitions = decoded ? Object.values(decoded.assignment).reduce((n, ps) => n + ps.length, 0) : 0;
      return { clientId: m.clientId, partitions };
    });
  } finally {
    await admin.disconnect();
  }
}
