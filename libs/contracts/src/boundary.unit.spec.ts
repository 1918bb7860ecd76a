import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { callerOf, parseCaller } from './caller';
import { isStorableText, ProjectId, storable } from './ids';

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

describe('contracts: caller headers', () => {
  it('reads an absent caller as anonymous and not an admin', () => {
    expect(parseCaller({})).toEqual({ ok: true, value: { user: 'anonymous', admin: false } });
    expect(callerOf({ 'x-labelflow-user': 'ops-1', 'x-labelflow-role': 'admin' })).toEqual({ user: 'ops-1', admin: true });
    expect(callerOf({ 'x-labelflow-user': ['first', 'second'], 'x-labelflow-role': 'reviewer' })).toEqual({ user: 'first', admin: false });
  });

  it('refuses a user that could not travel in an event and a role that is not a word', () => {
    for (const headers of [{ 'x-labelflow-user': 'a'.repeat(129) }, { 'x-labelflow-user': 'bad user' }, { 'x-labelflow-user': '-lead' }, { 'x-labelflow-role': 'Admin' }, { 'x-labelflow-role': 'admin; drop' }]) {
      expect(parseCaller(headers), JSON.stringify(headers)).toMatchObject({ ok: false, reason: { code: 'CALLER_INVALID' } });
      expect(() => callerOf(headers)).toThrow(expect.objectContaining({ code: 'CALLER_INVALID' }));
    }
  });
});
