import { describe, expect, it } from 'vitest';
import { redisMemoryBound } from './resources';

const info = (maxmemory: string, policy: string) => `# Memory\r\nused_memory:1048576\r\nmaxmemory:${maxmemory}\r\nmaxmemory_human:0B\r\nmaxmemory_policy:${policy}\r\n`;

describe('what INFO memory says of a Redis server memory bound', () => {
  it('calls a server with maxmemory and an LRU policy one that evicts', () => {
    expect(redisMemoryBound(info('536870912', 'volatile-lru'))).toEqual({ maxmemory: 536_870_912, policy: 'volatile-lru', evicts: true });
  });

  it('calls a server without maxmemory, or with noeviction, one that evicts nothing', () => {
    expect(redisMemoryBound(info('0', 'volatile-lru'))?.evicts).toBe(false);
    expect(redisMemoryBound(info('536870912', 'noeviction'))?.evicts).toBe(false);
  });

  it('knows nothing when INFO leaves the fields out', () => {
    expect(redisMemoryBound('')).toBeUndefined();
    expect(redisMemoryBound('# Memory\r\nused_memory:1\r\n')).toBeUndefined();
  });
});
