import type { Logger } from '@labelflow/telemetry';
import { endingRows, isTooLarge, type Pending } from './relay-batch';
import { FailReason, type RowMarks } from './relay-rows';

export interface SendApartDeps {
  readonly logger: Logger;
  readonly marks: RowMarks;
  /** Sends rows to Kafka; resolves once every one is acknowledged. */
  readonly send: (rows: readonly Pending[]) => Promise<void>;
  /** Whether the relay may still send: it holds the lock and is not closing. */
  readonly leading: () => boolean;
}

/**
 * Sends `rows` (which the broker refused together as too large) in halves, recursively and in id
 * order, marking each part as it goes. A row refused on its own is parked, and so is every later
 * row of its key, so that the key's events never overtake it. A bundle is parked whole when one of
 * its messages is refused: the messages sent before it stay sent, and clearing its `failed_at`
 * sends it all again (consumers dedup); every key of a parked bundle holds its later rows.
 */
export async function sendApart(deps: SendApartDeps, rows: readonly Pending[], refusal: unknown): Promise<void> {
  const { logger, marks, send, leading } = deps;
  const parkedKeys = new Set<string>();
  const parkedIds = new Set<string>();
  // A bundle is parked whole: each of its keys now holds the rest of the batch back.
  const parkWhole = (parked: readonly Pending[]) => {
    for (const p of parked) parkedIds.add(p.id);
    for (const r of rows) if (parkedIds.has(r.id)) parkedKeys.add(r.message.key);
  };
  const visit = async (part: readonly Pending[], knownTooLarge: unknown): Promise<void> => {
    if (!leading()) return;
    // The rest of a bundle parked as too large stays parked for that reason, not as held.
    const unparked = part.filter((r) => !parkedIds.has(r.id));
    const held = unparked.filter((r) => parkedKeys.has(r.message.key));
    const live = unparked.filter((r) => !parkedKeys.has(r.message.key));
    if (held.length > 0) {
      await marks.parkHeld(held);
      parkWhole(held);
    }
    if (live.length === 0) return;
    // The first call is for a batch the broker has just refused whole: no need to ask again.
    let refused = held.length === 0 && unparked.length === part.length ? knownTooLarge : undefined;
    if (!refused) {
      try {
        await send(live);
        // A bundle is marked by its last message only (see Pending.ends).
        const ended = endingRows(live);
        if (ended.length > 0) await marks.markPublished(ended);
        return;
      } catch (error) {
        if (!isTooLarge(error)) throw error;
        refused = error;
      }
    }
    if (live.length > 1) {
      const mid = Math.ceil(live.length / 2);
      await visit(live.slice(0, mid), undefined);
      await visit(live.slice(mid), undefined);
      return;
    }
    const [row] = live;
    if (!row) return;
    const detail = { outboxId: row.id, topic: row.message.topic, key: row.message.key, bytes: row.bytes, err: refused };
    await marks.park(live, FailReason.tooLarge, `too large for topic ${row.message.topic} (${row.bytes} bytes counted): ${(refused as Error).message}`);
    parkWhole(live);
    logger.error(detail, 'outbox row too large for its topic; parked (failed_at set), later rows of its key are held behind it');
  };
  await visit(rows, refusal);
}
