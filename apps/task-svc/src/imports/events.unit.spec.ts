import { describe, expect, it } from 'vitest';
import type { ProjectId, TaskId } from '@labelflow/contracts';
import { formatTaskNumber } from '@labelflow/idgen';
import { createEmitter } from '@labelflow/service-kit';
import { createdEvents, type CreatedTask } from './decide';
import { readLine } from './parse';

// The import prepares its TaskCreated events with `check: 'first'`: only the first of a batch is
// checked against the schema, on the ground that every line already passed ImportLine, whose
// limits are TaskCreated's. This proves that inclusion over lines at, around and past the limits.

/** mulberry32: a seeded generator, so a failure names lines that can be replayed. */
const random = (seed: number) => () => {
  seed = (seed + 0x6d2b79f5) | 0;
  let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
  t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
  return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
};

// Characters a line may hold, and some it may not hold raw (NUL, unpaired surrogates).
const fine = ['a', 'Z', '7', ' ', '\t', '\n', 'é', '標', '🏷️', '"', '\\', '\u001e', '\u001f', '\u2028'];
const bad = ['\u0000', '\ud800', '\udc00'];

function text(next: () => number, max: number): string {
  const lengths = [0, 1, max - 1, max, max, max + 1, Math.floor(next() * max)];
  const length = lengths[Math.floor(next() * lengths.length)] ?? 1;
  const dirty = next() < 0.1;
  let s = next() < 0.2 ? '  ' : '';
  // Mostly plain letters, so that long strings at the limit are common, with the odd piece.
  while (s.length < length) {
    const roll = next();
    s += roll < 0.9 ? 'x' : dirty && roll < 0.92 ? (bad[Math.floor(next() * bad.length)] ?? '') : (fine[Math.floor(next() * fine.length)] ?? 'x');
  }
  return s.slice(0, length);
}

describe('the TaskCreated events of an import', () => {
  it('pass their schema for every line ImportLine accepts, at and past every limit', async () => {
    const next = random(20261127);
    const accepted: CreatedTask[] = [];
    let rejected = 0;
    for (let n = 1; n <= 3_000; n++) {
      const line = { externalId: text(next, 256), title: text(next, 500), dataUri: `s3://${text(next, 2043)}` };
      const verdict = readLine({ number: n, bytes: Buffer.from(JSON.stringify(line)) }, 16_384);
      if (verdict.kind !== 'task') {
        rejected++;
        continue;
      }
      accepted.push({ taskId: String(1_000_000 + n) as TaskId, taskNumber: formatTaskNumber('PRJ', n), ...verdict.task });
    }
    // Not a test that cannot fail: both sides of every limit were reached.
    expect(accepted.length).toBeGreaterThan(200);
    expect(rejected).toBeGreaterThan(200);
    expect(accepted.some((t) => t.title.length === 500)).toBe(true);
    expect(accepted.some((t) => t.dataUri.length === 2048)).toBe(true);
    expect(accepted.some((t) => t.externalId.length === 256)).toBe(true);

    let id = 1n;
    const emitter = createEmitter({ producer: 'task-svc', topicPrefix: 'lf', channel: 'outbox_task_svc', now: () => new Date('2026-11-27T00:00:00Z'), newId: () => String(id++) });
    const drafts = createdEvents('6f1c1b9e-8a43-4a5e-9d6e-2f0a4b1c3d5e' as ProjectId, 'alice@example.com', accepted);
    // `each`: a draft the schema refuses throws EVENT_INVALID, naming the field.
    const prepared = await emitter.prepare(drafts, 'import:imp-1', { check: 'each' });
    expect(prepared.events).toHaveLength(accepted.length);
  });
});
