import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { ActorName, isStorableText, ProjectId, storable } from './ids';

describe('contracts: text that PostgreSQL can store', () => {
  it('accepts ordinary text, emoji and other paired surrogates', () => {
    for (const text of ['cat', 'Zürich', '猫', 'a 🐈 b', '']) expect(isStorableText(text), text).toBe(true);
  });

  it('refuses NUL and a surrogate half without its pair, wherever it stands', () => {
    for (const text of ['a\u0000b', '\ud800', 'x\udc00', '\udc00\ud800', 'end \ud83d']) expect(isStorableText(text), JSON.stringify(text)).toBe(false);
  });

  it('adds the check to a schema without loosening its other rules', () => {
    const Title = storable(z.string().trim().min(1).max(5));
    expect(Title.parse('  cat ')).toBe('cat');
    expect(Title.safeParse('a\u0000').success).toBe(false);
    expect(Title.safeParse('toolong').success).toBe(false);
  });
});

describe('contracts: ProjectId', () => {
  it('reads a UUID in any case and gives it back in lower case, so one project has one spelling', () => {
    expect(ProjectId.parse('C6C7D0A2-1B2C-4D5E-8F90-ABCDEF012345')).toBe('c6c7d0a2-1b2c-4d5e-8f90-abcdef012345');
    expect(ProjectId.safeParse('not-a-uuid').success).toBe(false);
  });
});

describe('contracts: ActorName', () => {
  it('accepts the names people and services act under', () => {
    for (const name of ['ops-1', 'alice@example.com', 'svc.billing_2', 'a'.repeat(128)]) expect(ActorName.safeParse(name).success, name).toBe(true);
  });

  it('refuses a name that could not travel in an event: too long, empty, with spaces or separators, or starting with punctuation', () => {
    for (const name of ['a'.repeat(129), '', 'bad user', '-lead', 'admin; drop', 'a/b']) expect(ActorName.safeParse(name).success, JSON.stringify(name)).toBe(false);
  });
});
