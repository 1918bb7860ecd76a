import { pgArray } from '@labelflow/plumbing';
import type pg from 'pg';
import { OutboxError, OutboxErrors } from './errors';
import { bundleFrameKeys, endingRows, isTooLarge, pendingOf, take, type Pending } from './relay-batch';
import type { ReadRow, RowMarks } from './relay-rows';

/** A drain that is caught up but keeps hearing NOTIFYs reads on for at most this long. */
const MAX_DRAIN_MS_ON_NOTIFY = 1_000;

/** What one drain needs of its relay: the relay's I/O, and the state that outlives a drain. */
export interface DrainDeps {
  readonly batchSize: number;
  readonly maxBatchBytes: number;
  /** The read statement for the table as it is now (readSql). */
  readonly sql: string;
  /** NOTIFYs heard so far: one heard while a read ran means more rows may have committed. */
  readonly notifications: () => number;
  /** Whether the relay may still send: it holds the lock and is not closing. */
  readonly leading: () => boolean;
  /**
   * Average counted bytes and messages per row of the last read, carried from drain to drain:
   * they bound the next read's LIMIT for very large rows and for bundles, so that a read brings
   * about a batch of messages (and at most twice maxBatchBytes), as it does of plain rows.
   */
  readonly rowSize: { bytesPerRow: number; messagesPerRow: number };
  readonly marks: RowMarks;
  readonly send: (rows: readonly Pending[]) => Promise<void>;
  /** Sends a batch the broker refused as too large in parts, parking the rows it refuses alone. */
  readonly sendApart: (rows: readonly Pending[], refusal: unknown) => Promise<void>;
}

/**
 * Publishes whatever is pending, in id order, until caught up, closed or no longer leading.
 * Returns true if rows may be left that the next drain must pick up at once.
 *
 * Three lanes, each one thing at a time: the Kafka lane (this loop) sends batch after batch; the
 * read lane (on the LISTEN session) reads the next batch while the current one is sent; the mark
 * lane (a pool connection) marks what was sent, every batch sent since its last UPDATE in one,
 * while the next batch is sent and read.
 */
export async function drain(deps: DrainDeps, session: pg.PoolClient): Promise<boolean> {
  const { batchSize, maxBatchBytes, sql, rowSize, marks: rowMarks } = deps;
  const reads = createLane();
  const marks = createLane();
  const failed = () => reads.failed || marks.failed;
  const startedAt = Date.now();
  // Rows read and not yet sent, in id order.
  const window: Pending[] = [];
  let cursor = '0';
  // Ids of the rows this drain read whose mark (or park) is not queued yet: the rows at or below
  // the cursor that a read expects to find still pending.
  const unresolved = new Set<string>();
  // Rows whose UPDATE is queued or running: a read skips them, committed or not.
  const resolving = new Set<string>();
  const toMark: Pending[] = [];
  let markQueued = false;
  let exhausted = false;
  let again = false;
  let reading: Promise<void> | undefined;
  // Keys of the unreadable rows this drain parked, and the lowest such row's id. Their parks are
  // queued on the mark lane, so a read that runs before one commits would not see the key among
  // the read's `parked`, and could send a later row of it ahead of the one set aside.
  const parkedHere: Record<string, string> = {};

  const read = async () => {
    const limit =
      rowSize.bytesPerRow > 0 ? Math.max(1, Math.min(batchSize, Math.ceil((2 * maxBatchBytes) / rowSize.bytesPerRow), Math.ceil(batchSize / rowSize.messagesPerRow))) : batchSize;
    const seen = deps.notifications();
    // Taken together, in one synchronous step: a mark that commits later is skipped by id.
    const skipping = [...resolving];
    const known = [...unresolved];
    const { rows } = await session.query<ReadRow>(sql, [cursor, maxBatchBytes, known.length + limit, pgArray(skipping), pgArray(known)]);
    const first = rows[0];
    if (!first) {
      exhausted = true;
      return;
    }
    if (first.behind > 0) {
      // A row below the cursor committed after the cursor passed it (ids are taken at INSERT,
      // rows become visible at COMMIT). Sending this read could let a later event of its key
      // overtake it: drop the read, finish what is in flight and start again from the lowest id.
      // It is found by id, not by count: rows of ours that another relay marked meanwhile (one
      // that led before this one and had sent them) would hide as many late rows from a count.
      exhausted = true;
      again = true;
      return;
    }
    let bytes = 0;
    let messages = 0;
    let parked = first.parked;
    for (const [key, id] of Object.entries(parkedHere)) if (parked?.[key] === undefined) parked = { ...parked, [key]: id };
    // A bundle set aside holds back every key it carries, from its id on, as the next reads will
    // once its park commits: in this read too, or a later row of one of its other keys would go
    // out ahead of that key's event inside the bundle.
    const holdBack = (keys: Iterable<string>, id: string) => {
      for (const key of keys) {
        parkedHere[key] ??= id;
        if (parked?.[key] === undefined) parked = { ...parked, [key]: id };
      }
    };
    for (const r of rows) {
      unresolved.add(r.id);
      let entries: Pending[];
      try {
        entries = pendingOf({ id: r.id, topic: r.topic, key: r.message_key, payload: r.payload, headers: r.headers, messages: r.messages }, parked);
      } catch (error) {
        if (!(error instanceof OutboxError && error.code === OutboxErrors.ROW_INVALID)) throw error;
        // A bundle that cannot be read would stop the relay at every read: parked instead, every
        // key its frames name holds its later rows back (in this drain through `parkedHere`, in
        // later ones through the read's `parked`, once the park has committed).
        const row: Pending = { id: r.id, message: { topic: r.topic, key: r.message_key, value: '', headers: {} }, bytes: 0, held: true, ends: 1 };
        resolve([row], (rows) => rowMarks.parkUnreadable(rows, error));
        holdBack([r.message_key, ...bundleFrameKeys(r.messages ?? '')], r.id);
        continue;
      }
      if (r.messages !== null && entries[0]?.held) holdBack(entries.map((e) => e.message.key), r.id);
      for (const entry of entries) {
        bytes += entry.bytes;
        messages++;
        window.push(entry);
      }
    }
    rowSize.bytesPerRow = bytes / rows.length;
    rowSize.messagesPerRow = messages / rows.length;
    cursor = rows[rows.length - 1]?.id ?? cursor;
    // Caught up: fewer rows than asked for and none left behind by the byte cut. A NOTIFY since
    // the read began means more may have committed: read on rather than restart the pipeline,
    // but only for a while, so that a steady trickle still lets prune() and a fresh start run.
    const caughtUp = first.fetched < limit && rows.length === first.fetched;
    if (caughtUp && (deps.notifications() === seen || Date.now() - startedAt > MAX_DRAIN_MS_ON_NOTIFY)) exhausted = true;
  };
  const readMore = () => {
    const p: Promise<void> = reads.run(read).then(() => {
      if (reading === p) reading = undefined;
    });
    reading = p;
  };
  const resolve = (rows: readonly Pending[], update: (rows: readonly Pending[]) => Promise<void>) => {
    for (const r of rows) {
      resolving.add(r.id);
      unresolved.delete(r.id);
    }
    void marks.run(async () => {
      await update(rows);
      for (const r of rows) resolving.delete(r.id);
    });
  };
  const markSent = (sent: readonly Pending[]) => {
    // A bundle whose last message is still to be sent stays pending: a crash now sends it again whole.
    const rows = endingRows(sent);
    if (rows.length === 0) return;
    for (const r of rows) {
      resolving.add(r.id);
      unresolved.delete(r.id);
    }
    toMark.push(...rows);
    if (markQueued) return;
    markQueued = true;
    void marks.run(async () => {
      markQueued = false;
      const batch = toMark.splice(0);
      await rowMarks.markPublished(batch);
      for (const r of batch) resolving.delete(r.id);
    });
  };

  try {
    for (;;) {
      if (window.length === 0 && !reading && !exhausted && !failed()) readMore();
      if (window.length === 0) {
        if (!reading) break;
        await reading;
        continue;
      }
      // Stopping between batches keeps close() within the service's shutdown budget, and a
      // relay whose LISTEN session (and so its lock) is gone must not send another batch.
      if (!deps.leading() || failed()) break;
      const { batch, held } = take(window, batchSize, maxBatchBytes);
      // Read-ahead: the next batch is read while this one is sent.
      if (!reading && !exhausted && window.length < batchSize) readMore();
      if (held.length > 0) resolve(held, rowMarks.parkHeld);
      if (batch.length === 0) continue;
      try {
        await deps.send(batch);
      } catch (error) {
        if (!isTooLarge(error)) throw error;
        // Rare: the topic refused the batch as too large. Stop the pipeline, send this batch
        // again in halves down to single rows, and start the next drain from the lowest id.
        await Promise.all([reads.idle(), marks.idle()]);
        window.length = 0;
        again = true;
        if (!failed()) await deps.sendApart(batch, error);
        break;
      }
      markSent(batch);
    }
  } finally {
    // Marks of batches already sent land before this drain ends, whatever happens: the next
    // drain reads from the lowest pending id and must not see them again.
    await Promise.all([reads.idle(), marks.idle()]);
  }
  if (marks.failed) throw marks.error;
  if (reads.failed) throw reads.error;
  return again;
}

/** Database work of one drain, one statement at a time and in order, so a read never races a mark. The first failure skips the rest. */
function createLane() {
  let tail: Promise<void> = Promise.resolve();
  const lane = {
    failed: false,
    error: undefined as unknown,
    run(op: () => Promise<void>): Promise<void> {
      tail = tail.then(async () => {
        if (lane.failed) return;
        try {
          await op();
        } catch (error) {
          lane.failed = true;
          lane.error = error;
        }
      });
      return tail;
    },
    idle: () => tail,
  };
  return lane;
}
