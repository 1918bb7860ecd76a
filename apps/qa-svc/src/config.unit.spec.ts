import { describe, expect, it } from 'vitest';
import { loadConfig } from '@labelflow/service-kit';
import { QaSvcConfig } from './config';

const env = {
  KAFKA_BROKERS: 'localhost:9092',
  DATABASE_URL: 'postgres://u:p@localhost:5432/qa',
  REDIS_URL: 'redis://localhost:6379',
  AUTH_ISSUER: 'https://idp.test',
  AUTH_AUDIENCE: 'labelflow',
  AUTH_JWKS_URL: 'https://idp.test/.well-known/jwks.json',
};

describe('qa-svc: configuration', () => {
  it('defaults the review SLA to 72 hours', () => {
    expect(loadConfig(QaSvcConfig, env).QA_SLA_MS).toBe(259_200_000);
  });

  it('reads QA_SLA_MS from the environment', () => {
    expect(loadConfig(QaSvcConfig, { ...env, QA_SLA_MS: '1500' }).QA_SLA_MS).toBe(1500);
  });

  it.each(['0', '-5', '1.5', 'soon'])('refuses QA_SLA_MS=%s naming the variable', (value) => {
    expect(() => loadConfig(QaSvcConfig, { ...env, QA_SLA_MS: value })).toThrow(/QA_SLA_MS/);
  });
});
