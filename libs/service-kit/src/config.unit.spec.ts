import { describe, expect, it } from 'vitest';
import { BaseConfig, loadConfig } from './config';
import { ServiceKitError, ServiceKitErrors } from './errors';

const validEnv = {
  PORT: '3001',
  KAFKA_BROKERS: 'kafka-1:9092, kafka-2:9092',
  DATABASE_URL: 'postgres://user:pw@localhost:5432/tasks',
  REDIS_URL: 'redis://localhost:6379',
};
const failure = (env: Record<string, string | undefined>): ServiceKitError => {
  try {
    loadConfig(BaseConfig, env);
  } catch (error) {
    return error as ServiceKitError;
  }
  throw new Error('expected loadConfig to throw');
};

describe('service-kit: loadConfig', () => {
  it('parses a valid environment and applies the defaults', () => {
    // toMatchObject: services keep adding optional settings; this pins the ones that exist today.
    expect(loadConfig(BaseConfig, validEnv)).toMatchObject({
      PORT: 3001,
      HOST: '0.0.0.0',
      KAFKA_BROKERS: ['kafka-1:9092', 'kafka-2:9092'],
      KAFKA_TOPIC_PREFIX: 'labelflow',
      KAFKA_TOPIC_PARTITIONS: 6,
      DATABASE_URL: 'postgres://user:pw@localhost:5432/tasks',
      REDIS_URL: 'redis://localhost:6379',
      LOG_LEVEL: 'info',
      OUTBOX_POLL_MS: 500,
      OUTBOX_BATCH_SIZE: 500,
      FAULT_KILL_BEFORE_PUBLISH: false,
    });
  });

  it('throws CONFIG_INVALID listing every bad variable at once', () => {
    const error = failure({ ...validEnv, KAFKA_BROKERS: 'kafka-without-port', PORT: 'eighty', DATABASE_URL: 'mysql://localhost/tasks' });

    expect(error).toBeInstanceOf(ServiceKitError);
    expect(error.code).toBe(ServiceKitErrors.CONFIG_INVALID);
    const problems = error.details as string[];
    expect(problems).toHaveLength(3);
    expect(problems.some((p) => p.startsWith('KAFKA_BROKERS'))).toBe(true);
    expect(problems.some((p) => p.startsWith('PORT'))).toBe(true);
    expect(problems.some((p) => p.startsWith('DATABASE_URL'))).toBe(true);
    expect(error.message).toMatch(/KAFKA_BROKERS[\s\S]*PORT|PORT[\s\S]*KAFKA_BROKERS/);
  });

  it('reports required variables that are missing', () => {
    const error = failure({ PORT: '3001' });

    const names = (error.details as string[]).map((p) => p.split(':')[0]);
    expect(names).toEqual(expect.arrayContaining(['KAFKA_BROKERS', 'DATABASE_URL', 'REDIS_URL']));
  });

  it('rejects a broker list that is only separators', () => {
    expect(failure({ ...validEnv, KAFKA_BROKERS: ' , ' }).code).toBe(ServiceKitErrors.CONFIG_INVALID);
  });

  it('treats a blank variable as unset instead of coercing it to 0', () => {
    expect(loadConfig(BaseConfig, { ...validEnv, OUTBOX_POLL_MS: '   ' }).OUTBOX_POLL_MS).toBe(500);
    expect((failure({ ...validEnv, PORT: ' ' }).details as string[]).map((p) => p.split(':')[0])).toEqual(['PORT']);
  });

  it('rejects a broker port outside 1-65535 at startup', () => {
    const problems = failure({ ...validEnv, KAFKA_BROKERS: 'localhost:99999' }).details as string[];
    expect(problems).toEqual([expect.stringMatching(/^KAFKA_BROKERS.*port 1-65535/)]);
  });
});
