import { ServiceKitError, ServiceKitErrors } from './errors';
import { dedupTypeOf, type ConsumedEvent, type ConsumedOf, type ConsumedType, type DomainEvent, type TaskId } from '@labelflow/contracts';
import { formatKey, recordManyInInbox, type DedupGate, type DedupKey } from '@labelflow/dedup';
import type { BatchProcessor, Delivery, DeliveryOutcome } from '@labelflow/messaging';
import { notify, type Notification } from '@labelflow/outbox';
import { consumedTraceHeaders, continuedTraceHeaders, currentTraceHeaders, incomingTraceHeaders, tracingEnabled, withSpan, type TraceHeaders } from '@labelflow/telemetry';
import { withTransaction, type Pool, type PoolClient } from './db';
import type { Executed, Rejection } from './decider';
import type { DraftGroup, EmitMany, EventDraft } from './events';

/**
 * The states of one batch's tasks inside its transaction: loaded (and locked) together when the
 * batch opens, changed event by event in memory, written together at the end.
 */
export interface StateBatch<S> {
  /** Synchronous when the batch preloaded its states: the hot path then awaits nothing per event. */
  get(taskId: TaskId): S | Promise<S>;
  /** The state after one event; `previous` is what `get` returned before it. */
  set(taskId: TaskId, previous: S, next: S): void | Promise<void>;
  /** Writes everything that changed, with as few statements as the store can. */
  save(): Promise<void>;
}

/** `E`: the events the store is opened for; the saga's events unless its capability also reads an input topic. */
export interface BatchStore<S, E extends ConsumedEvent = DomainEvent> {
  /** Loads and locks the states of the events' tasks, in task id order so batches never deadlock. */
  open(tx: PoolClient, events: readonly E[]): Promise<StateBatch<S>>;
}

/** What a handler may know of the delivery that brought its event, besides the event itself. */
export interface DeliveryFacts {
  /** The trace headers the event travelled with, continued as its outgoing events will carry them. */
  readonly trace: () => TraceHeaders;
  /** When the event reached its topic (the Kafka record's timestamp, epoch ms). */
  readonly publishedAt: number;
}

/** A consumed event's reaction: pure, given the task's state (time and config come through `ctx`, the delivery's trace through `delivery`). */
export type EventHandler<T extends ConsumedType, S, X> = (event: ConsumedOf<T>, state: S, ctx: X, delivery: DeliveryFacts) => Executed<S, EventDraft, Rejection>;
export type EventHandlers<S, X> = { readonly [T in ConsumedType]?: EventHandler<T, S, X> };

/** What one event came to inside its batch. */
export type Applied = { readonly ok: true; readonly events: readonly EventDraft[] } | { readonly ok: false; readonly reason: Rejection };

/** A capability's consumer with its state type hidden, so a service can hold several. */
export interface EventConsumer<X> {
  readonly types: readonly ConsumedType[];
  open(tx: PoolClient, events: readonly ConsumedEvent[], ctx: X): Promise<{ apply(event: ConsumedEvent, delivery: DeliveryFacts): Applied | Promise<Applied>; save(): Promise<void> }>;
  /**
   * Told, after the run, of its deliveries dropped as duplicates (an observer counts them per task).
   * Outside the transaction and best effort: it must not throw, or the run would be retried.
   */
  readonly dropped?: (events: readonly ConsumedEvent[], ctx: X) => Promise<void>;
  /** Told, after the run committed, of its deliveries its handlers refused, with the refusal's code (best effort, as `dropped`). */
  readonly ignored?: (refused: readonly { readonly event: ConsumedEvent; readonly code: string }[], ctx: X) => Promise<void>;
}

/** Binds handlers to the store their states live in. */
export function eventConsumer<S, X, E extends ConsumedEvent = DomainEvent>(store: BatchStore<S, E>, on: EventHandlers<S, X>): EventConsumer<X> {
  const types = Object.keys(on) as ConsumedType[];
  return {
    types,
    async open(tx, events, ctx) {
      // The shell opens a consumer only with events of its handlers' types, which its store reads.
      const states = await store.open(tx, events as readonly E[]);
      const step = (event: ConsumedEvent, delivery: DeliveryFacts, handler: EventHandler<ConsumedType, S, X>, state: S): Applied | Promise<Applied> => {
        const result = handler(event as never, state, ctx, delivery);
        if (!result.ok) return result;
        const applied: Applied = { ok: true, events: result.events };
        if (result.state === state) return applied;
        const saved = states.set(event.taskId, state, result.state);
        return saved instanceof Promise ? saved.then(() => applied) : applied;
      };
      return {
        apply(event, delivery) {
          const handler = on[event.type] as EventHandler<ConsumedType, S, X> | undefined;
          if (!handler) return { ok: false, reason: { code: 'NOT_HANDLED', message: `no handler for ${event.type}` } };
          const state = states.get(event.taskId);
          return state instanceof Promise ? state.then((loaded) => step(event, delivery, handler, loaded)) : step(event, delivery, handler, state);
        },
        save: () => states.save(),
      };
    },
  };
}

export const sortedTaskIds = <K extends string>(events: readonly { readonly taskId: K }[]): K[] => [...new Set(events.map((e) => e.taskId))].sort();

/**
 * A batch store whose states are loaded with one query per table and written with one statement
 * per table. `loadMany` must lock what it loads; `saveMany` gets each changed task's state as
 * loaded and as it ended after the batch.
 */
export function preloadedStore<S, E extends ConsumedEvent = DomainEvent>(deps: {
  readonly loadMany: (tx: PoolClient, taskIds: readonly TaskId[], events: readonly E[]) => Promise<ReadonlyMap<string, S>>;
  readonly saveMany: (tx: PoolClient, changes: readonly { readonly before: S; readonly after: S }[]) => Promise<void>;
}): BatchStore<S, E> {
  return {
    async open(tx, events) {
      const loaded = await deps.loadMany(tx, sortedTaskIds(events), events);
      const current = new Map(loaded);
      return {
        get(taskId) {
          const state = current.get(taskId);
          if (state === undefined) throw new ServiceKitError(ServiceKitErrors.INVARIANT_BROKEN, `task ${taskId} was not loaded with its batch`);
          return state;
        },
        set(taskId, _previous, next) {
          current.set(taskId, next);
        },
        async save() {
          const changes = [...current].flatMap(([id, after]) => {
            const before = loaded.get(id)!;
            return before === after ? [] : [{ before, after }];
          });
          if (changes.length > 0) await deps.saveMany(tx, changes);
        },
      };
    },
  };
}

export interface ExactlyOnceDeps<X> {
  readonly pool: Pool;
  readonly gate: DedupGate;
  readonly consumers: readonly EventConsumer<X>[];
  readonly ctx: X;
  readonly emitMany: EmitMany;
  /**
   * What to NOTIFY in the batch's transaction about the tasks it changed (e.g. to wake waiting
   * requests): sent with the outbox insert when the batch emits, else by itself.
   */
  readonly onApplied?: (taskIds: readonly string[]) => Notification;
  /**
   * How long the run's transaction waits for a row lock (a task another instance holds in a
   * transaction of its own) before giving up with a transient error, retried. kafkajs heartbeats
   * only between runs, so a wait longer than the session timeout would have the member evicted
   * and the group rebalance around a lock nobody releases; the retry loop heartbeats while it
   * waits. Unbounded when absent.
   */
  readonly lockTimeoutMs?: number;
}

// The one place a consumed event's dedup key is derived (the type part: see dedupTypeOf).
const dedupKeyOf = (e: ConsumedEvent): DedupKey => ({ taskId: e.taskId, eventType: dedupTypeOf(e), attempt: e.attempt });

type OpenedConsumer<X> = Awaited<ReturnType<EventConsumer<X>['open']>>;
/** One event's result inside the run, with the trace headers its outgoing events carry. */
type OneApplied = readonly [Applied, () => TraceHeaders];
/** A delivery of the run with its dedup key, derived once, and its place in the run. */
interface Fresh {
  readonly delivery: Delivery<ConsumedEvent>;
  readonly key: DedupKey;
  /** `formatKey(key)`: how the inbox reports it back. */
  readonly id: string;
  readonly index: number;
}
const APPLIED: DeliveryOutcome = { status: 'applied' };
const PROCEED = { kind: 'proceed' } as const;

/**
 * The exactly-once shell, top to bottom, for one run of consumed events:
 *  1. derive each event's dedup key (task, type, attempt) once; a key repeated inside the run is a
 *     duplicate of its first delivery;
 *  2. ask the gate (Redis, or Bloom + inbox while Redis is away) which keys are already done;
 *  3. in ONE transaction: insert the remaining keys into the inbox with one statement (the
 *     authority: what it does not return is a duplicate), load and lock every task's state, decide
 *     and fold each event in order in memory, save what changed, append every outgoing event to the
 *     outbox with one insert and one NOTIFY;
 *  4. after the commit, mark the keys done in Redis.
 * Any throw rolls everything back: nothing of the run was applied, and the consumer loop retries it
 * or splits it to find the message that fails.
 */
export function createExactlyOnce<X>(deps: ExactlyOnceDeps<X>): BatchProcessor<ConsumedEvent> {
  const byType = new Map<ConsumedType, EventConsumer<X>>();
  for (const consumer of deps.consumers) {
    for (const type of consumer.types) {
      if (byType.has(type)) throw new ServiceKitError(ServiceKitErrors.DEFINITION_INVALID, `two capabilities react to ${type}`);
      byType.set(type, consumer);
    }
  }

  /**
   * One event inside the batch's transaction. While a tracer records, a span per event, so what it
   * emits continues the trace of the message that caused it. Otherwise no span and no async context:
   * the outgoing rows carry the message's own trace headers onward, which is what a non-recording
   * span would have passed on, and a preloaded state needs no await at all.
   */
  function applyOne(batch: OpenedConsumer<X>, { event, meta }: Delivery<ConsumedEvent>): OneApplied | Promise<OneApplied> {
    if (tracingEnabled()) {
      // Baggage from the event, not from its producer (an outside model worker may be one).
      const carried = consumedTraceHeaders(meta.headers, { taskId: event.taskId, projectId: event.projectId, attempt: event.attempt });
      return withSpan(`consume ${event.type}`, 'consumer', carried, { 'messaging.destination': meta.topic, 'messaging.kafka.offset': meta.offset, 'labelflow.task_id': event.taskId }, async () => {
        const trace = currentTraceHeaders();
        const facts: DeliveryFacts = { trace: () => trace, publishedAt: meta.timestamp };
        return [await batch.apply(event, facts), facts.trace] as const;
      });
    }
    let trace: TraceHeaders | undefined;
    // No span records, so no baggage of ours: a producer's is dropped, not carried on.
    const facts: DeliveryFacts = { trace: () => (trace ??= continuedTraceHeaders(meta.headers.baggage === undefined ? meta.headers : incomingTraceHeaders(meta.headers))), publishedAt: meta.timestamp };
    const result = batch.apply(event, facts);
    return result instanceof Promise ? result.then((applied) => [applied, facts.trace] as const) : [result, facts.trace];
  }

  /** `fresh`: the run's deliveries the gate let through, with their keys (formatted) and places in the run. */
  const lockWait = deps.lockTimeoutMs === undefined ? {} : { lockTimeoutMs: deps.lockTimeoutMs };
  async function transact(fresh: readonly Fresh[], outcomes: DeliveryOutcome[]): Promise<void> {
    await withTransaction(deps.pool, async (tx) => {
      const inserted = await recordManyInInbox(
        tx,
        fresh.map(({ delivery: { event, meta }, key }) => ({ taskId: key.taskId, eventType: key.eventType, attempt: key.attempt, eventId: event.id, source: meta.source })),
      );
      const toApply: Fresh[] = [];
      for (const f of fresh) {
        if (inserted.has(f.id)) toApply.push(f);
        else outcomes[f.index] = { status: 'duplicate', tier: 'postgres' };
      }
      if (toApply.length === 0) return;

      const opened = new Map<EventConsumer<X>, OpenedConsumer<X>>();
      for (const consumer of new Set(toApply.map(({ delivery }) => byType.get(delivery.event.type)!))) {
        opened.set(consumer, await consumer.open(tx, toApply.filter(({ delivery }) => byType.get(delivery.event.type) === consumer).map(({ delivery }) => delivery.event), deps.ctx));
      }
      const groups: DraftGroup[] = [];
      const changed = new Set<string>();
      for (const { delivery, index } of toApply) {
        const { event } = delivery;
        const one = applyOne(opened.get(byType.get(event.type)!)!, delivery);
        const [applied, trace] = one instanceof Promise ? await one : one;
        if (!applied.ok) {
          outcomes[index] = { status: 'ignored', code: applied.reason.code, reason: applied.reason.message };
          continue;
        }
        outcomes[index] = APPLIED;
        changed.add(event.taskId);
        if (applied.events.length > 0) groups.push({ drafts: applied.events, causationId: event.id, trace: trace() });
      }
      for (const batch of opened.values()) await batch.save();
      const signal = changed.size > 0 ? deps.onApplied?.([...changed]) : undefined;
      if (groups.length > 0) await deps.emitMany(tx, groups, signal);
      else if (signal) await notify(tx, signal);
    }, lockWait);
  }

  return {
    handles: (type) => byType.has(type as ConsumedType),
    async process(deliveries) {
      const outcomes: DeliveryOutcome[] = new Array(deliveries.length);
      const unique: Fresh[] = [];
      const seen = new Set<string>();
      deliveries.forEach((delivery, index) => {
        const key = dedupKeyOf(delivery.event);
        const id = formatKey(key);
        if (seen.has(id)) {
          outcomes[index] = { status: 'duplicate', tier: 'batch' };
          return;
        }
        seen.add(id);
        unique.push({ delivery, key, id, index });
      });
      const verdicts = await deps.gate.check(unique.map((u) => u.key));
      const fresh: Fresh[] = [];
      const done: DedupKey[] = [];
      unique.forEach((u, j) => {
        const verdict = verdicts[j] ?? PROCEED;
        // Redis learns only what PostgreSQL holds: keys it already knew as done need no second write.
        if (!(verdict.kind === 'duplicate' && verdict.tier === 'redis')) done.push(u.key);
        if (verdict.kind === 'duplicate') outcomes[u.index] = { status: 'duplicate', tier: verdict.tier };
        else fresh.push(u);
      });
      if (fresh.length > 0) await transact(fresh, outcomes);
      await deps.gate.committed(done);
      const dropped = deliveries.filter((_, i) => outcomes[i]?.status === 'duplicate').map((d) => d.event);
      for (const consumer of new Set(dropped.map((e) => byType.get(e.type)!))) {
        await consumer.dropped?.(dropped.filter((e) => byType.get(e.type) === consumer), deps.ctx);
      }
      const refused = deliveries.flatMap((d, i) => {
        const outcome = outcomes[i];
        return outcome?.status === 'ignored' ? [{ event: d.event, code: outcome.code }] : [];
      });
      for (const consumer of new Set(refused.map(({ event }) => byType.get(event.type)!))) {
        await consumer.ignored?.(refused.filter(({ event }) => byType.get(event.type) === consumer), deps.ctx);
      }
      return outcomes;
    },
  };
}
