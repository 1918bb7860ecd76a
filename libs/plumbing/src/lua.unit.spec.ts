import { describe, expect, it } from 'vitest';
import type { Redis } from 'ioredis';
import { PlumbingErrors } from './errors';
import { boundedRedisCall, createLuaScripts } from './lua';

/** Just enough of an ioredis client: SCRIPT LOAD hands out shas, EVALSHA answers what the test says. */
const fakeRedis = (evalsha: (sha: string) => Promise<unknown>) => {
  const loads: string[] = [];
  const redis = {
    script: async (_op: string, source: string) => (loads.push(source), `sha-${loads.length}`),
    evalsha: (sha: string) => evalsha(sha),
  } as unknown as Redis;
  return { redis, loads };
};

const never = () => new Promise<never>(() => undefined);

describe('Lua scripts run by EVALSHA', () => {
  it('loads a script once and runs it by its sha afterwards', async () => {
    const { redis, loads } = fakeRedis(async (sha) => `ran ${sha}`);
    const lua = createLuaScripts({ redis, scripts: { get: 'return 1' }, timeoutMs: 50 });
    expect(await lua.run('get', ['k'], [])).toBe('ran sha-1');
    expect(await lua.run('get', ['k'], [])).toBe('ran sha-1');
    expect(loads).toEqual(['return 1']);
  });

  it('reloads the script and retries once when Redis forgot it (NOSCRIPT)', async () => {
    const { redis, loads } = fakeRedis(async (sha) => {
      if (sha === 'sha-1') throw new Error('NOSCRIPT No matching script');
      return `ran ${sha}`;
    });
    const reloaded: string[] = [];
    const lua = createLuaScripts({ redis, scripts: { get: 'return 1' }, timeoutMs: 50, onScriptLoad: (name) => reloaded.push(name) });
    expect(await lua.run('get', ['k'], [])).toBe('ran sha-2');
    expect(loads).toHaveLength(2);
    expect(reloaded).toEqual(['get', 'get']);
  });

  it('maps a failure and a timeout to the errors the caller chose', async () => {
    const fail = (kind: string, message: string) => Object.assign(new Error(message), { code: `MINE_${kind}` });
    const down = createLuaScripts({ redis: fakeRedis(() => Promise.reject(new Error('ECONNREFUSED'))).redis, scripts: { get: 'x' }, timeoutMs: 50, fail });
    await expect(down.run('get', [], [])).rejects.toMatchObject({ code: 'MINE_unavailable', message: expect.stringContaining('ECONNREFUSED') });
    const slow = createLuaScripts({ redis: fakeRedis(never).redis, scripts: { get: 'x' }, timeoutMs: 20, fail });
    await expect(slow.run('get', [], [])).rejects.toMatchObject({ code: 'MINE_timeout' });
  });
});

describe('a bounded Redis call', () => {
  it('raises retriable plumbing errors when the caller maps none', async () => {
    await expect(boundedRedisCall('ping', never(), 10)).rejects.toMatchObject({ code: PlumbingErrors.REDIS_TIMEOUT, retriable: true });
    await expect(boundedRedisCall('ping', Promise.reject(new Error('gone')), 10)).rejects.toMatchObject({ code: PlumbingErrors.REDIS_UNAVAILABLE, retriable: true });
  });

  it('swallows an answer that arrives after the timeout instead of leaving an unhandled rejection', async () => {
    let lateFailure!: (e: Error) => void;
    const late = new Promise<never>((_, reject) => (lateFailure = reject));
    await expect(boundedRedisCall('ping', late, 10)).rejects.toMatchObject({ code: PlumbingErrors.REDIS_TIMEOUT });
    lateFailure(new Error('too late'));
    await expect(late.catch(() => 'handled')).resolves.toBe('handled');
  });
});
