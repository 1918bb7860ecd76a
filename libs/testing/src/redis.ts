import { Redis } from 'ioredis';

/** Deletes every key matching `pattern` (SCAN, never KEYS), e.g. one test's dedup namespace. */
export async function deleteRedisKeys(url: string, pattern: string): Promise<number> {
  const redis = new Redis(url);
  try {
    let deleted = 0;
    let cursor = '0';
    do {
      const [next, keys] = await redis.scan(cursor, 'MATCH', pattern, 'COUNT', 1000);
      cursor = next;
      if (keys.length > 0) deleted += await redis.del(...keys);
    } while (cursor !== '0');
    return deleted;
  } finally {
    redis.disconnect();
  }
}
