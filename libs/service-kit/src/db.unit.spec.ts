import { describe, expect, it } from 'vitest';
import { createPool, isTransientDbError } from './db';

const withCode = (code: string) => Object.assign(new Error(`failed with ${code}`), { code });

describe('isTransientDbError', () => {
  it('is true for SQLSTATEs of a sick database: connection, resources, system I/O, serialization, cancel, shutdown, switchover', () => {
    for (const code of ['08006', '08001', '53100', '53200', '53300', '58030', '40001', '40003', '40P01', '57014', '57P01', '57P03', '57P05', '25006', '25P03']) {
      expect(isTransientDbError(withCode(code)), code).toBe(true);
    }
  });

  it('is true for network errors by code or by message', () => {
    for (const code of ['ENOTFOUND', 'EAI_AGAIN', 'EHOSTUNREACH', 'ENETUNREACH', 'ECONNREFUSED', 'ECONNRESET']) expect(isTransientDbError(withCode(code)), code).toBe(true);
    expect(isTransientDbError(new Error('Connection terminated unexpectedly'))).toBe(true);
    expect(isTransientDbError(new Error('timeout exceeded when trying to connect'))).toBe(true);
  });

  it('is true for a pool that has ended, as on shutdown: the work it refuses is no bad message', async () => {
    const pool = createPool('postgres://nobody@127.0.0.1:1/none');
    await pool.end();
    const refused = await pool.query('SELECT 1').catch((error: unknown) => error);
    expect(isTransientDbError(refused)).toBe(true);
  });

  it('is false for errors of the statement or the data, and for things that are not errors at all', () => {
    for (const code of ['23505', '22012', '42P01', '22P02', '57P04', '0A000']) expect(isTransientDbError(withCode(code)), code).toBe(false);
    expect(isTransientDbError(new TypeError('x is undefined'))).toBe(false);
    expect(isTransientDbError({})).toBe(false);
  });

  it('is true for a prepared statement outdated by a column another instance added, and for no other 0A000', () => {
    expect(isTransientDbError(Object.assign(new Error('cached plan must not change result type'), { code: '0A000' }))).toBe(true);
    expect(isTransientDbError(Object.assign(new Error('cached plan must not change result type'), { code: '42P01' }))).toBe(false);
    expect(isTransientDbError(Object.assign(new Error('unsupported feature'), { code: '0A000' }))).toBe(false);
    expect(isTransientDbError(undefined)).toBe(false);
  });
});

describe('createPool', () => {
  it('asks for TCP keepalive, so a server gone without a reset is found dead instead of hanging an idle LISTEN session forever', async () => {
    const pool = createPool('postgres://nobody@127.0.0.1:1/none');
    const options = (pool as unknown as { options: { keepAlive?: boolean; keepAliveInitialDelayMillis?: number } }).options;
    expect([options.keepAlive, options.keepAliveInitialDelayMillis]).toEqual([true, 10_000]);
    await pool.end();
  });
});
