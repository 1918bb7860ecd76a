import { createRequire } from 'node:module';
import { MessagingError, MessagingErrors } from './errors';
import { KAFKAJS_FIXED_VERSION } from './kafkajs-idle-loop';

/**
 * A batching consumer (`minBytes` 64 KiB, `maxWaitTimeInMs` 50 in the services) fetches twenty
 * times a second whatever the traffic: with nothing to read, every fetch waits out its 50 ms and
 * comes back empty. The five services' groups kept the 2-core machine's broker at about 90 ms of CPU a second
 * and each service at about 20 ms, with no saga running. kafkajs takes the fetch settings once per
 * consumer and has no incremental fetch sessions.
 *
 * The idle long poll changes the settings between fetches, by what the last ones brought back.
 * After `afterEmpty` fetches in a row that brought no message (2 s of silence with 40 and
 * 50 ms), the next one asks for `minBytes` 1 and waits up to `waitMs`: the broker answers as
 * soon as a message arrives, so a quiet consumer costs a few fetches a second and its next event
 * waits no longer than before (less: it is answered at once instead of at the end of a 50 ms
 * window). After a fetch that brought messages, the consumer's own settings are back, so under
 * load every fetch still gathers a batch and nothing changes.
 *
 * The settings are fields of kafkajs's ConsumerGroup that its `fetch` reads on every call; this
 * wraps that method, once per process, and only on kafkajs 2.2.4. A group opts in with
 * `useIdleLongPoll`; the consumers of every other group fetch as kafkajs would.
 */

export interface IdleLongPoll {
  /** How long a fetch of the long poll waits for a first message. */
  readonly waitMs: number;
  /**
   * Empty fetches in a row before the long poll starts. A consumer that sees a message every few
   * windows keeps its batches: the first message after a quiet window, answered at once, is a
   * transaction of its own, where a 50 ms window might have gathered it with the next.
   */
  readonly afterEmpty: number;
}

/** The two settings kafkajs's ConsumerGroup reads for each fetch. */
export interface FetchSettings {
  readonly minBytes: number;
  readonly maxWaitTime: number;
}

/**
 * The settings of the next fetch, given the empty fetches in a row so far (this one included):
 * the consumer's own until `afterEmpty` of them, the long poll from then on.
 */
export function nextFetchSettings(configured: FetchSettings, emptyInARow: number, policy: IdleLongPoll): FetchSettings {
  if (emptyInARow < policy.afterEmpty) return configured;
  return { minBytes: 1, maxWaitTime: Math.max(configured.maxWaitTime, policy.waitMs) };
}

export const IdleLongPollSetup = {
  applied: 'applied',
  /** Another kafkajs than the one the wrapper was written for: the consumer fetches as kafkajs would. */
  versionMismatch: 'version-mismatch',
} as const;
export type IdleLongPollSetup = (typeof IdleLongPollSetup)[keyof typeof IdleLongPollSetup];

/** What the wrapper reads and writes of a kafkajs ConsumerGroup. */
interface GroupState {
  readonly groupId: string;
  minBytes: number;
  maxWaitTime: number;
}
interface FetchedBatch {
  isEmptyIncludingFiltered(): boolean;
}
/** The policies of the groups that opted in, with how many consumers of each hold it. */
type Policies = Map<string, { readonly policy: IdleLongPoll; holders: number }>;
interface ConsumerGroupClass {
  prototype: { fetch(this: GroupState, nodeId: number): Promise<FetchedBatch[]> };
  [POLICIES]?: Policies;
}

// On kafkajs's class, like the wrapper itself: one per process, whoever loads this module.
const POLICIES = Symbol.for('labelflow.kafkajs.idle-long-poll');

/** Each ConsumerGroup's own settings, taken before its first fetch changes them, and its empty fetches in a row. */
const groupStates = new WeakMap<GroupState, { readonly configured: FetchSettings; empty: number }>();

function wrapFetch(ConsumerGroup: ConsumerGroupClass): Policies {
  const existing = ConsumerGroup[POLICIES];
  if (existing) return existing;
  const policies: Policies = new Map();
  const original = ConsumerGroup.prototype.fetch;
  ConsumerGroup.prototype.fetch = async function fetch(this: GroupState, nodeId: number): Promise<FetchedBatch[]> {
    let state = groupStates.get(this);
    if (state === undefined) groupStates.set(this, (state = { configured: { minBytes: this.minBytes, maxWaitTime: this.maxWaitTime }, empty: 0 }));
    const batches = await original.call(this, nodeId);
    state.empty = batches.some((b) => !b.isEmptyIncludingFiltered()) ? 0 : state.empty + 1;
    const held = policies.get(this.groupId);
    const next = held ? nextFetchSettings(state.configured, state.empty, held.policy) : state.configured;
    this.minBytes = next.minBytes;
    this.maxWaitTime = next.maxWaitTime;
    return batches;
  };
  ConsumerGroup[POLICIES] = policies;
  return policies;
}

/**
 * Makes the consumers of `groupId` in this process fetch with the idle long poll (above) until
 * `release` is called; call before `consumer.run`. By group id because kafkajs keeps its
 * ConsumerGroup out of reach of the consumer that runs it.
 */
export function useIdleLongPoll(groupId: string, policy: IdleLongPoll): { readonly setup: IdleLongPollSetup; release(): void } {
  const require = createRequire(import.meta.url);
  const { version } = require('kafkajs/package.json') as { version: string };
  if (version !== KAFKAJS_FIXED_VERSION) return { setup: IdleLongPollSetup.versionMismatch, release: () => undefined };
  const policies = wrapFetch(require('kafkajs/src/consumer/consumerGroup.js') as ConsumerGroupClass);
  const held = policies.get(groupId);
  // One group's consumers in a process share one policy; a second one would be ignored without a word.
  if (held && (held.policy.waitMs !== policy.waitMs || held.policy.afterEmpty !== policy.afterEmpty)) {
    throw new MessagingError(
      MessagingErrors.CONFIG_INVALID,
      `consumer group ${groupId} already fetches with an idle long poll of ${held.policy.waitMs} ms after ${held.policy.afterEmpty} empty fetches in this process; another of ${policy.waitMs} ms after ${policy.afterEmpty} would be ignored`,
    );
  }
  if (held) held.holders++;
  else policies.set(groupId, { policy, holders: 1 });
  let released = false;
  return {
    setup: IdleLongPollSetup.applied,
    release() {
      if (released) return;
      released = true;
      const entry = policies.get(groupId);
      if (entry && --entry.holders === 0) policies.delete(groupId);
    },
  };
}
