import { dedupTypeOf, type ConsumedEvent, type ConsumedOf, type ConsumedType, type DomainEvent, type TaskId } from '@labelflow/contracts';
import { formatKey, recordManyInInbox, type DedupGate, type DedupKey } from '@labelflow/dedup';
import type { BatchProcessor, Delivery, DeliveryOutcome } from '@labelflow/messaging';
import { currentTraceHeaders, withSpan } from '@labelflow/telemetry';
import { withTransaction, type Pool, type PoolClient, type Queryable } from './db';
import type { Executed, Rejection } from './decider';
import type { DraftGroup, EmitMany, EventDraft } from './events';

/**
 * The states of one batch's tasks inside its transaction: loaded (and locked) together when the
 * batch opens, changed event by event in memory, written together at the end.
 */
export interface StateBatch<S> {
  get(taskId: TaskId): Promise<S>;
  /** The state after one event; `previous` is what `get` returned before it. */
  set(taskId: TaskId, previous: S, next: S): Promise<void>;
  /** Writes everything that changed, with as few statements as the store can. */
  save(): Promise<void>;
}

/** `E`: the events the store is opened for; the saga's events unless its capability also reads an input topic. */
export interface BatchStore<S, E extends ConsumedEvent = DomainEvent> {
  /** Loads and locks the states of the events' tasks, in task id order so batches never deadlock. */
  open(tx: PoolClient, events: readonly E[]): Promise<StateBatch<S>>;
}

/** A consumed event's reaction: pure, given the task's state (time and config come through `ctx`). */
export type EventHandler<T extends ConsumedType, S, X> = (event: ConsumedOf<T>, state: S, ctx: X) => Executed<S, EventDraft, Rejection>;
export type EventHandlers<S, X> = { readonly [T in ConsumedType]?: EventHandler<T, S, X> };

/** What one event came to inside its batch. */
export type Applied = { readonly ok: true; readonly events: readonly EventDraft[] } | { readonly ok: false; readonly reason: Rejection };

/** A capability's consumer with its state type hidden, so a service can hold several. */
export interface EventConsumer<X> {
  readonly types: readonly ConsumedType[];
  open(tx: PoolClient, events: readonly ConsumedEvent[], ctx: X): Promise<{ apply(event: ConsumedEvent): Promise<Applied>; save(): Promise<void> }>;
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
      return {
        async apply(event) {
          const handler = on[event.type] as EventHandler<ConsumedType, S, X> | undefined;
          if (!handler) return { ok: false, reason: { code: 'NOT_HANDLED', message: `no handler for ${event.type}` } };
          const state = await states.get(event.taskId);
          const result = handler(event as never, state, ctx);
          if (!result.ok) return result;
          if (result.state !== state) await states.set(event.taskId, state, result.state);
          return { ok: true, events: result.events };
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
        async get(taskId) {
          const state = current.get(taskId);
          if (state === undefined) throw new Error(`task ${taskId} was not loaded with its batch`);
          return state;
        },
        async set(taskId, _previous, next) {
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
  /** Runs in the batch's transaction with the tasks it changed (e.g. to wake waiting requests). */
  readonly onApplied?: (tx: Queryable, taskIds: readonly string[]) => Promise<void>;
}

// The one place a consumed event's dedup key is derived (the type part: see dedupTypeOf).
const dedupKeyOf = (e: ConsumedEvent): DedupKey => ({ taskId: e.taskId, eventType: dedupTypeOf(e), attempt: e.attempt });

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
      if (byType.has(type)) throw new Error(`two capabilities react to ${type}`);
      byType.set(type, consumer);
    }
  }

  async function transact(fresh: readonly Delivery<ConsumedEvent>[], outcomes: DeliveryOutcome[], indexOf: Map<Delivery<ConsumedEvent>, number>): Promise<void> {
    await withTransaction(deps.pool, async (tx) => {
      const inserted = await recordManyInInbox(
        tx,
        fresh.map(({ event, meta }) => ({ ...dedupKeyOf(event), eventId: event.id, source: meta.source })),
      );
      const toApply = fresh.filter(({ event }) => inserted.has(formatKey(dedupKeyOf(event))));
      for (const d of fresh) if (!inserted.has(formatKey(dedupKeyOf(d.event)))) outcomes[indexOf.get(d)!] = { status: 'duplicate', tier: 'postgres' };
      if (toApply.length === 0) return;

      const opened = new Map<EventConsumer<X>, Awaited<ReturnType<EventConsumer<X>['open']>>>();
      for (const consumer of new Set(toApply.map(({ event }) => byType.get(event.type)!))) {
        opened.set(consumer, await consumer.open(tx, toApply.filter(({ event }) => byType.get(event.type) === consumer).map((d) => d.event), deps.ctx));
      }
      const groups: DraftGroup[] = [];
      const changed = new Set<string>();
      for (const delivery of toApply) {
        const { event, meta } = delivery;
        const batch = opened.get(byType.get(event.type)!)!;
        // A span per event, so what it emits continues the trace of the message that caused it.
        const [applied, trace] = await withSpan(`consume ${event.type}`, 'consumer', meta.headers, { 'messaging.destination': meta.topic, 'messaging.kafka.offset': meta.offset, 'labelflow.task_id': event.taskId }, async () =>
          [await batch.apply(event), currentTraceHeaders()] as const,
        );
        if (!applied.ok) {
          outcomes[indexOf.get(delivery)!] = { status: 'ignored', code: applied.reason.code, reason: applied.reason.message };
          continue;
        }
        outcomes[indexOf.get(delivery)!] = { status: 'applied' };
        changed.add(event.taskId);
        if (applied.events.length > 0) groups.push({ drafts: applied.events, causationId: event.id, trace });
      }
      for (const batch of opened.values()) await batch.save();
      if (groups.length > 0) await deps.emitMany(tx, groups);
      if (changed.size > 0 && deps.onApplied) await deps.onApplied(tx, [...changed]);
    });
  }

  return {
    handles: (type) => byType.has(type as ConsumedType),
    async process(deliveries) {
      const outcomes: DeliveryOutcome[] = new Array(deliveries.length);
      const first = new Map<string, number>();
      deliveries.forEach(({ event }, i) => {
        const key = formatKey(dedupKeyOf(event));
        if (first.has(key)) outcomes[i] = { status: 'duplicate', tier: 'batch' };
        else first.set(key, i);
      });
      const unique = [...first.values()].map((i) => deliveries[i]!);
      const verdicts = await deps.gate.check(unique.map(({ event }) => dedupKeyOf(event)));
      const fresh: Delivery<ConsumedEvent>[] = [];
      const indexOf = new Map<Delivery<ConsumedEvent>, number>();
      unique.forEach((d, j) => {
        const verdict = verdicts[j] ?? { kind: 'proceed' };
        const i = first.get(formatKey(dedupKeyOf(d.event)))!;
        if (verdict.kind === 'duplicate') {
          outcomes[i] = { status: 'duplicate', tier: verdict.tier };
        } else {
          fresh.push(d);
          indexOf.set(d, i);
        }
      });
      if (fresh.length > 0) await transact(fresh, outcomes, indexOf);
      // Redis learns only what PostgreSQL holds: keys it already knew as done need no second write.
      const done = unique.filter((_, j) => !(verdicts[j]?.kind === 'duplicate' && verdicts[j]?.tier === 'redis'));
      await deps.gate.committed(done.map(({ event }) => dedupKeyOf(event)));
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
