import { describe, expect, it } from 'vitest';
import { importFileChunks, importLines, LineKind, planImportFile, type ImportFileOptions } from './ndjson';

const file = (over: Partial<ImportFileOptions> = {}): ImportFileOptions => ({ lines: 10_000, repeat: 0.2, bad: 0.01, seed: 7, tag: 'run1', ...over });

describe('the generated import file', () => {
  it('holds exactly the planned numbers of new, repeated and bad lines', () => {
    const plan = planImportFile(file());
    expect(plan).toEqual({ lines: 10_000, distinct: 7_900, repeats: 2_000, bad: 100 });
    const counts: Record<string, number> = {};
    const ids = new Set<string>();
    for (const l of importLines(file())) {
      counts[l.kind] = (counts[l.kind] ?? 0) + 1;
      if (l.kind !== LineKind.bad) ids.add((JSON.parse(l.text) as { externalId: string }).externalId);
    }
    expect(counts).toEqual({ item: 7_900, repeat: 2_000, bad: 100 });
    expect(ids.size).toBe(plan.distinct);
  });

  it('repeats only lines already sent, byte for byte', () => {
    const seen = new Map<number, string>();
    for (const l of importLines(file({ lines: 2_000, repeat: 0.5, bad: 0 }))) {
      if (l.kind === LineKind.item) seen.set(l.item ?? -1, l.text);
      if (l.kind === LineKind.repeat) expect(seen.get(l.item ?? -1)).toBe(l.text);
    }
    expect(seen.size).toBe(1_000);
  });

  it('makes bad lines the endpoint must reject: broken JSON, not an object, a field missing or mistyped, an empty id', () => {
    const bad = [...importLines(file({ lines: 500, repeat: 0, bad: 0.5 }))].filter((l) => l.kind === LineKind.bad);
    const valid = (text: string) => {
      try {
        const v = JSON.parse(text) as Record<string, unknown>;
        return typeof v === 'object' && !Array.isArray(v) && ['externalId', 'title', 'dataUri'].every((k) => typeof v[k] === 'string' && v[k] !== '');
      } catch {
        return false;
      }
    };
    expect(bad).toHaveLength(250);
    expect(bad.filter((l) => valid(l.text))).toEqual([]);
  });

  it('is the same file for the same seed and tag, so a re-upload sends the same lines', () => {
    const a = [...importLines(file({ lines: 1_000 }))].map((l) => l.text);
    expect([...importLines(file({ lines: 1_000 }))].map((l) => l.text)).toEqual(a);
    expect([...importLines(file({ lines: 1_000, seed: 8 }))].map((l) => l.text)).not.toEqual(a);
  });

  it('streams whole lines in chunks that add up to the file', async () => {
    const chunks: Buffer[] = [];
    for await (const c of importFileChunks(file({ lines: 1_001, linesPerChunk: 100 }))) chunks.push(c);
    expect(chunks).toHaveLength(11);
    expect(chunks.every((c) => c.at(-1) === 0x0a)).toBe(true);
    const text = Buffer.concat(chunks).toString();
    expect(text.split('\n').slice(0, -1)).toEqual([...importLines(file({ lines: 1_001 }))].map((l) => l.text));
  });

  it('refuses shares that leave nothing to repeat', () => {
    expect(() => planImportFile({ lines: 2, repeat: 0.5, bad: 0.5 })).toThrow(/leave no valid line to repeat/);
    expect(() => planImportFile({ lines: 0, repeat: 0, bad: 0 })).toThrow(/positive integer/);
  });
});
