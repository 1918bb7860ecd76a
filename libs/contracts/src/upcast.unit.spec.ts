import { describe, expect, it } from 'vitest';
import { LabelSubmitted, LabelSubmittedV1 } from './label-events';
import { TopicSchemas, topicOf, type EventType } from './topics';
import { LatestVersions, labelSubmittedAsV1, labelSubmittedV1ToV2, unsupportedVersion } from './upcast';

const envelope = {
  id: '7391122347129815040',
  taskId: '7391122347125620736',
  projectId: '22222222-2222-4222-8222-222222222222',
  attempt: 1,
  occurredAt: '2025-01-01T12:00:00.000Z',
  producer: 'label-svc',
  type: 'LabelSubmitted',
};
const annotations = [{ label: 'cat', confidence: 0.5 }];
const v1 = { ...envelope, version: 1, payload: { annotatorId: 'alice', annotations } };
const v2 = (durationMs: number | null) => ({ ...envelope, version: 2, payload: { annotatorId: 'alice', annotations, durationMs } });
const label = TopicSchemas.label;

describe('contracts: LabelSubmitted across its versions', () => {
  it('decodes v1 and v2 to the same newest shape, v1 with durationMs null (not measured)', () => {
    const fromV1 = label.parse(v1);

    expect(fromV1).toEqual(label.parse(v2(null)));
    expect(fromV1).toEqual(v2(null));
  });

  it('keeps the duration a v2 event carries', () => {
    expect(label.parse(v2(95_000)).payload).toEqual({ annotatorId: 'alice', annotations, durationMs: 95_000 });
  });

  it('runs the schema of the version the event names: a v2 without durationMs is invalid, not read as v1', () => {
    const result = label.safeParse({ ...v1, version: 2 });

    expect(result.success).toBe(false);
    expect(result.error?.issues.map((i) => i.path.join('.'))).toContain('payload.durationMs');
    expect(unsupportedVersion(result.error?.issues ?? [])).toBeUndefined();
  });

  it('refuses a negative or fractional duration', () => {
    expect(label.safeParse(v2(-1)).success).toBe(false);
    expect(label.safeParse(v2(1.5)).success).toBe(false);
  });

  it('refuses v3 with its own reason naming the type, the version and the newest known', () => {
    const result = label.safeParse({ ...v2(10), version: 3, payload: { whatever: 'v3 means' } });

    expect(result.success).toBe(false);
    expect(unsupportedVersion(result.error?.issues ?? [])).toEqual({ type: 'LabelSubmitted', version: 3, latest: 2 });
    expect(result.error?.issues).toHaveLength(1);
    expect(result.error?.issues[0]?.message).toBe('LabelSubmitted version 3 is newer than this code knows (up to version 2)');
  });

  it('still accepts a v1 event as input, so an instance pinned to v1 passes the emitter check', () => {
    expect(label.safeParse(labelSubmittedAsV1(LabelSubmitted.parse(v2(7)))).success).toBe(true);
  });

  it('writes the newest event as v1 by dropping only durationMs, which the upcaster gives back as null', () => {
    const written = labelSubmittedAsV1(LabelSubmitted.parse(v2(7)));

    expect(LabelSubmittedV1.parse(written)).toEqual(v1);
    expect(labelSubmittedV1ToV2(LabelSubmittedV1.parse(written))).toEqual(v2(null));
  });

  it('keeps who held the attempt when the newest event is written as v1, so a pinned instance does not let the holder review a model\'s labels', () => {
    const heldForModel = { ...v2(null), payload: { ...v2(null).payload, annotatorId: 'model.cat-detector@2.1', heldBy: 'alice' } };
    expect(label.parse(labelSubmittedAsV1(LabelSubmitted.parse(heldForModel))).payload.heldBy).toBe('alice');
  });

  it('hands out an upcast event as read-only as a parsed one', () => {
    const upcast = labelSubmittedV1ToV2(LabelSubmittedV1.parse(v1));
    expect(Object.isFrozen(upcast)).toBe(true);
    expect(Object.isFrozen(upcast.payload)).toBe(true);
    expect(Object.isFrozen(upcast.payload.annotations)).toBe(true);
  });
});

describe('contracts: versions of every event type', () => {
  const types = Object.keys(LatestVersions) as EventType[];
  const probe = (type: EventType, version: number) => TopicSchemas[topicOf(type)].safeParse({ ...envelope, producer: 'task-svc', type, version, payload: {} });

  it.each(types)('%s: every version up to the newest known selects a schema of its own', (type) => {
    for (let version = 1; version <= LatestVersions[type]; version++) {
      const issues = probe(type, version).error?.issues ?? [];
      expect(issues.length, `${type} v${version} with an empty payload`).toBeGreaterThan(0);
      expect(issues.map((i) => i.path.join('.')), `${type} v${version}`).not.toContain('version');
    }
  });

  it.each(types)('%s: the version after the newest known is refused as unsupported, not as an invalid event', (type) => {
    const latest = LatestVersions[type];
    expect(unsupportedVersion(probe(type, latest + 1).error?.issues ?? [])).toEqual({ type, version: latest + 1, latest });
  });

  it('reads a version below 1 or not a whole number as an invalid event, never as a newer one', () => {
    for (const version of [0, -1, 1.5, '3']) {
      const result = label.safeParse({ ...v1, version });
      expect(result.success, String(version)).toBe(false);
      expect(unsupportedVersion(result.error?.issues ?? []), String(version)).toBeUndefined();
    }
  });

  it('does not call a type the topic does not carry unsupported, whatever its version', () => {
    const result = TopicSchemas.label.safeParse({ ...v1, type: 'TaskCreated', version: 9 });

    expect(result.success).toBe(false);
    expect(unsupportedVersion(result.error?.issues ?? [])).toBeUndefined();
  });
});
