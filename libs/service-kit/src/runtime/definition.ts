import type { FastifyInstance } from 'fastify';
import type { ServiceName } from '@labelflow/contracts';
import type { Logger, Metrics } from '@labelflow/telemetry';
import type { BaseConfig } from '../config';
import type { EventConsumer } from '../consume';
import type { Pool } from '../db';
import type { Emit, Prepare } from '../events';
import type { Migration } from '../migrations';
import type { LongPollQuota } from '../prefer';
import type { TaskSignals } from '../signals';
import type { Sweeper } from '../sweeper';

/** A process on this runtime: one of the saga's services, or the saga monitor, which consumes every topic and publishes nothing. */
export type RuntimeName = ServiceName | 'saga-monitor';

export interface ServiceContext<C extends BaseConfig = BaseConfig> {
  readonly name: RuntimeName;
  readonly config: C;
  readonly logger: Logger;
  readonly metrics: Metrics;
  readonly pool: Pool;
  readonly now: () => Date;
  /** A new 64-bit time-ordered id for tasks and events (see IdSource). */
  readonly nextId: () => Promise<string>;
  /** A random UUID, for resources that are not tasks (projects). */
  readonly newUuid: () => string;
  /** Stamps drafts and appends them to the outbox inside `tx`. */
  readonly emit: Emit;
  /** `emit` in two halves: stamp, check and serialize before the transaction, write inside it. */
  readonly prepare: Prepare;
  /** Task-change signals across this service's instances: requests wait on them (Prefer: wait). */
  readonly signals: TaskSignals;
  /** Each caller's share of this instance's waiting requests: pass it to `honourPreferWait`. */
  readonly longPolls: LongPollQuota;
}

/** One capability of a service: how it reacts to events, its HTTP routes and its deadlines. */
export interface Capability<C extends BaseConfig = BaseConfig> {
  /** How it reacts to consumed events (see `eventConsumer`); applied by the exactly-once shell. */
  readonly consumes?: EventConsumer<ServiceContext<C>>;
  readonly routes?: (app: FastifyInstance, ctx: ServiceContext<C>) => void;
  readonly sweepers?: (ctx: ServiceContext<C>) => readonly Sweeper[];
  /** Housekeeping the runtime repeats while the service runs (retention prunes, for one). */
  readonly chores?: (ctx: ServiceContext<C>) => readonly Chore[];
}

/**
 * A job the runtime runs once the consumer and sweepers are up, then every `everyMs` until the
 * service closes. A failed run is logged and the next one tries again; a run still going when the
 * next is due is not doubled. Unlike a sweeper it emits nothing: it is for upkeep of the service's
 * own tables, not for deadlines of the saga.
 */
export interface Chore {
  readonly name: string;
  readonly everyMs: number;
  /** `signal` is aborted when the service closes, which waits for the run: a run that loops stops between rounds. */
  run(signal: AbortSignal): Promise<void>;
}

export interface ServiceDefinition<C extends BaseConfig = BaseConfig> {
  readonly name: RuntimeName;
  readonly migrations: readonly Migration[];
  readonly capabilities: readonly Capability<C>[];
  /**
   * Confirm Redis's "already done" against the inbox before skipping an event (one query per
   * batch): for services whose every effect moves money, so a marker planted in Redis cannot make
   * them skip a debit or a refund.
   */
  readonly confirmDedupInInbox?: boolean;
  /** Routes answered without a token besides /healthz and /readyz (a page that holds no data and asks for the token itself). */
  readonly publicRoutes?: readonly string[];
}

export const deadLetterTopic = (prefix: string, service: RuntimeName): string => `${prefix}.${service}.dlq`;
