import { describe, expect, it } from 'vitest';
import { loadConfig } from '@labelflow/service-kit';
import { TaskSvcConfig } from './config';

const env = {
  KAFKA_BROKERS: 'localhost:9092',
  DATABASE_URL: 'postgres://u:p@localhost:5432/tasks',
  REDIS_URL: 'redis://localhost:6379',
  AUTH_ISSUER: 'https://idp.test',
  AUTH_AUDIENCE: 'labelflow',
  AUTH_JWKS_URL: 'https://idp.test/.well-known/jwks.json',
};

describe('task-svc: configuration', () => {
  it('writes an import in batches of 2,000 valid lines by default', () => {
    expect(loadConfig(TaskSvcConfig, env).IMPORT_BATCH_SIZE).toBe(2_000);
  });

  it('caps the heap growth at twice the live heap by default, for its bulk import, where other services leave it to V8', () => {
    expect(loadConfig(TaskSvcConfig, env).HEAP_GROWING_PERCENT).toBe(100);
    expect(loadConfig(TaskSvcConfig, { ...env, HEAP_GROWING_PERCENT: '0' }).HEAP_GROWING_PERCENT).toBe(0);
  });

  it.each(['-1', '1.5', '301', 'lots'])('refuses HEAP_GROWING_PERCENT=%s naming the variable', (value) => {
    expect(() => loadConfig(TaskSvcConfig, { ...env, HEAP_GROWING_PERCENT: value })).toThrow(/HEAP_GROWING_PERCENT/);
  });
});
