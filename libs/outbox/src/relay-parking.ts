import type { Logger } from '@labelflow/telemetry';
import { isTooLarge, type Pending } from './relay-batch';
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
 * row of its key, so that the key's events never overtake it.
 */
export async function sendApart(deps: SendApartDeps, rows: readonly Pending[], refusal: unknown): Promise<void> {
  const { logger, marks, send, leading } = deps;
  const parkedKeys = new Set<string>();
  const visit = async (part: readonly Pending[], knownTooLarge: unknown): Promise<void> => {
    if (!leading()) return;
    const held = part.filter((r) => parkedKeys.has(r.message.key));
    const live = part.filter((r) => !parkedKeys.has(r.message.key));
    if (held.length > 0) await marks.parkHeld(held);
    if (live.length === 0) return;
    // The first call is for a batch the broker has just refused whole: no need to ask again.
    let refused = held.length === 0 ? knownTooLarge : undefined;
    if (!refused) {
      try {
        await send(live);
        await marks.markPublished(live);
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
    parkedKeys.add(row.message.key);
    logger.error(detail, 'outbox row too large for its topic; parked (failed_at set), later rows of its key are held behind it');
  };
  await visit(rows, refusal);
}
