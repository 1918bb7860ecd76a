import { EventEmitter } from 'node:events';
import type pg from 'pg';
import { describe, expect, it } from 'vitest';
import { guardedPool } from './pools';

// Never connected: creating a pool opens nothing, and the events below are what pg-pool emits.
const config = { connectionString: 'postgres://nobody@127.0.0.1:1/none', max: 2 };
const killed = () => new Error('terminating connection due to administrator command');

describe('a pool the tools read the databases with (guardedPool)', () => {
  it('reports an idle connection the server ended instead of crashing the process', async () => {
    const seen: string[] = [];
    const pool = guardedPool(config, (e) => seen.push(e.message));
    try {
      expect(() => pool.emit('error', killed(), {} as pg.PoolClient)).not.toThrow();
      expect(seen).toEqual(['terminating connection due to administrator command']);
    } finally {
      await pool.end();
    }
  });

  it('reports an error of a connection while it is lent, and leaves the pool to report it once it is back', async () => {
    const seen: Error[] = [];
    const pool = guardedPool(config, (e) => seen.push(e));
    const client = new EventEmitter() as unknown as pg.PoolClient;
    try {
      pool.emit('acquire', client);
      expect(() => client.emit('error', killed())).not.toThrow();
      expect(seen).toHaveLength(1);
      pool.emit('release', undefined, client);
      expect(client.listenerCount('error')).toBe(0);
    } finally {
      await pool.end();
    }
  });
});
