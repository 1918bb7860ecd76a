import { describe, expect, it } from 'vitest';
import { buildPrelabelProposed, dedupTypeOf, InputTopicSchemas, isMachineActor, machineActorId, prelabelMessage, ActorName } from './index';

const input = {
  id: 'proposal-1',
  taskId: '7000000000000000001',
  projectId: '22222222-2222-4222-8222-222222222222',
  attempt: 1,
  model: { name: 'cat-detector', version: '2.1' },
  annotations: [{ label: 'cat', confidence: 0.97 }],
};

describe('contracts: PrelabelProposed', () => {
  it('builds a message keyed by task id with the event-type and event-version headers that the topic schema reads back', () => {
    const message = prelabelMessage(buildPrelabelProposed(input));
    expect(message.key).toBe(input.taskId);
    expect(message.headers).toEqual({ 'event-type': 'PrelabelProposed', 'event-version': '1' });
    expect(InputTopicSchemas.prelabels.parse(JSON.parse(message.value))).toMatchObject({ ...input, type: 'PrelabelProposed', version: 1 });
  });

  it('refuses a proposal without a confidence, with a confidence above 1, or with no annotations', () => {
    expect(() => buildPrelabelProposed({ ...input, annotations: [{ label: 'cat' } as never] })).toThrow();
    expect(() => buildPrelabelProposed({ ...input, annotations: [{ label: 'cat', confidence: 1.2 }] })).toThrow();
    expect(() => buildPrelabelProposed({ ...input, annotations: [] })).toThrow();
  });

  it('refuses a proposal dated in year 0000, which PostgreSQL cannot store, and takes year 0001 even with an offset', () => {
    const at = (occurredAt: string) => InputTopicSchemas.prelabels.safeParse({ ...buildPrelabelProposed(input), occurredAt }).success;
    expect(at('0000-01-01T00:00:00Z')).toBe(false);
    expect(at('0000-12-31T23:59:59-01:00')).toBe(false);
    expect(at('0001-01-01T00:00:00+01:00')).toBe(true);
    expect(at('2030-01-01T00:00:00Z')).toBe(true);
  });

  it('refuses a proposal dated with more fractional digits than nanoseconds, which PostgreSQL cannot store past a length', () => {
    const at = (occurredAt: string) => InputTopicSchemas.prelabels.safeParse({ ...buildPrelabelProposed(input), occurredAt }).success;
    expect(at('2030-01-01T00:00:00.123456789Z')).toBe(true);
    expect(at('2030-01-01T00:00:00.1234567890Z')).toBe(false);
    expect(at(`2030-01-01T00:00:00.${'1'.repeat(120)}+01:00`)).toBe(false);
  });

  it('refuses a newer version than it knows as unsupported rather than guessing', () => {
    const parsed = InputTopicSchemas.prelabels.safeParse({ ...buildPrelabelProposed(input), version: 2 });
    expect(parsed.success).toBe(false);
  });

  it('derives one dedup type per project, model name and version, so a model re-publishing is a duplicate and another version or project is not', () => {
    const a = buildPrelabelProposed(input);
    expect(dedupTypeOf(a)).toBe(`PrelabelProposed:${input.projectId}:cat-detector@2.1`);
    expect(dedupTypeOf(buildPrelabelProposed({ ...input, projectId: '33333333-3333-4333-8333-333333333333' }))).not.toBe(dedupTypeOf(a));
    expect(dedupTypeOf(buildPrelabelProposed({ ...input, id: 'other-id' }))).toBe(dedupTypeOf(a));
    expect(dedupTypeOf(buildPrelabelProposed({ ...input, model: { name: 'cat-detector', version: '2.2' } }))).not.toBe(dedupTypeOf(a));
  });

  it('names the machine actor as an ActorName that isMachineActor recognises, even at the longest name and version', () => {
    const longest = { name: 'n'.repeat(64), version: 'v'.repeat(57) } as Parameters<typeof machineActorId>[0];
    for (const model of [buildPrelabelProposed(input).model, longest]) {
      const id = machineActorId(model);
      expect(ActorName.safeParse(id).success).toBe(true);
      expect(isMachineActor(id)).toBe(true);
    }
    expect(isMachineActor('alice')).toBe(false);
    expect(isMachineActor('model.x')).toBe(false);
  });
});
