import { describe, expect, it } from 'vitest';
import { loadConfig } from '@labelflow/service-kit';
import { SagaMonitorConfig } from './config';

const env = {
  KAFKA_BROKERS: 'localhost:9092',
  DATABASE_URL: 'postgres://u:p@localhost:5432/saga_monitor',
  REDIS_URL: 'redis://localhost:6379',
  AUTH_ISSUER: 'https://idp.test',
  AUTH_AUDIENCE: 'labelflow',
  AUTH_JWKS_URL: 'https://idp.test/.well-known/jwks.json',
};

describe('saga-monitor: configuration', () => {
  it('listens on 3005 and gives every watched step 5 s by default, with no webhook', () => {
    const config = loadConfig(SagaMonitorConfig, env);
    expect([config.PORT, config.SAGA_DEADLINE_QA_STARTED_MS, config.SAGA_DEADLINE_BILLING_MS, config.SAGA_DEADLINE_COMPLETED_MS]).toEqual([3005, 5_000, 5_000, 5_000]);
    expect(config.MONITOR_WEBHOOK_URL).toBeUndefined();
  });

  it('keeps ended sagas 30 days by default, and forever with MONITOR_RETENTION_HOURS=0', () => {
    expect(loadConfig(SagaMonitorConfig, env).MONITOR_RETENTION_HOURS).toBe(720);
    expect(loadConfig(SagaMonitorConfig, { ...env, MONITOR_RETENTION_HOURS: '0' }).MONITOR_RETENTION_HOURS).toBe(0);
  });

  it('reads each step deadline, the webhook and the Jaeger address from the environment', () => {
    const config = loadConfig(SagaMonitorConfig, { ...env, SAGA_DEADLINE_QA_STARTED_MS: '1500', SAGA_DEADLINE_BILLING_MS: '2500', SAGA_DEADLINE_COMPLETED_MS: '3500', MONITOR_WEBHOOK_URL: 'http://127.0.0.1:9000/hook', JAEGER_URL: 'http://127.0.0.1:16686' });
    expect([config.SAGA_DEADLINE_QA_STARTED_MS, config.SAGA_DEADLINE_BILLING_MS, config.SAGA_DEADLINE_COMPLETED_MS]).toEqual([1_500, 2_500, 3_500]);
    expect([config.MONITOR_WEBHOOK_URL, config.JAEGER_URL]).toEqual(['http://127.0.0.1:9000/hook', 'http://127.0.0.1:16686']);
  });

  it.each([
    ['SAGA_DEADLINE_QA_STARTED_MS', '0'],
    ['SAGA_DEADLINE_BILLING_MS', 'soon'],
    ['MONITOR_WEBHOOK_URL', 'ftp://example.com/hook'],
    ['JAEGER_URL', 'not a url'],
    ['MONITOR_RETENTION_HOURS', '-1'],
  ])('refuses %s=%s naming the variable', (name, value) => {
    expect(() => loadConfig(SagaMonitorConfig, { ...env, [name]: value })).toThrow(new RegExp(name));
  });
});
