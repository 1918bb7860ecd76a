import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { BaseConfig, loadConfig } from './config';
import { ServiceKitError, ServiceKitErrors } from './errors';
import { KafkaSecurityShape, kafkaSecurity, kafkaSecurityProblems } from './kafka-security';

const validEnv = {
  PORT: '3001',
  KAFKA_BROKERS: 'kafka-1:9092, kafka-2:9092',
  DATABASE_URL: 'postgres://user:pw@localhost:5432/tasks',
  REDIS_URL: 'redis://localhost:6379',
  // Required since services verify bearer tokens: who issues them, for whom, with which public key.
  AUTH_ISSUER: 'https://id.example.com/',
  AUTH_AUDIENCE: 'labelflow',
  AUTH_PUBLIC_KEYS: JSON.stringify({ keys: [{ kty: 'OKP', crv: 'Ed25519', x: '11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo' }] }),
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
  it('refuses a Bloom filter sized past 256 MiB a generation and an error rate under one in a million, naming the variables, before anything is allocated', () => {
    expect(failure({ ...validEnv, DEDUP_BLOOM_CAPACITY: '100000000', DEDUP_BLOOM_ERROR_RATE: '0.000001' }).message).toMatch(/DEDUP_BLOOM_CAPACITY: 100000000 keys at DEDUP_BLOOM_ERROR_RATE 0.000001 make a Bloom generation of \d+ MiB/);
    expect(failure({ ...validEnv, DEDUP_BLOOM_ERROR_RATE: '1e-300' }).message).toMatch(/DEDUP_BLOOM_ERROR_RATE/);
    expect(loadConfig(BaseConfig, { ...validEnv, DEDUP_BLOOM_CAPACITY: '100000000', DEDUP_BLOOM_ERROR_RATE: '0.01' })).toMatchObject({ DEDUP_BLOOM_CAPACITY: 100_000_000 });
  });

  it('refuses a METRICS_PORT equal to PORT, which would only fail at the last step of the start', () => {
    expect(failure({ ...validEnv, METRICS_PORT: '3001' }).details).toEqual(['METRICS_PORT: must differ from PORT (the token-free scrape port is a second listener)']);
    expect(loadConfig(BaseConfig, { ...validEnv, PORT: '0', METRICS_PORT: '0' })).toMatchObject({ PORT: 0, METRICS_PORT: 0 });
  });

  it('parses a valid environment and applies the defaults', () => {
    // toMatchObject: services keep adding optional settings; this pins the ones that exist today.
    expect(loadConfig(BaseConfig, validEnv)).toMatchObject({
      PORT: 3001,
      HOST: '0.0.0.0',
      KAFKA_BROKERS: ['kafka-1:9092', 'kafka-2:9092'],
      KAFKA_TOPIC_PREFIX: 'labelflow',
      KAFKA_TOPIC_PARTITIONS: 6,
      KAFKA_TOPIC_REPLICATION_FACTOR: 1,
      DATABASE_URL: 'postgres://user:pw@localhost:5432/tasks',
      REDIS_URL: 'redis://localhost:6379',
      LOG_LEVEL: 'info',
      OUTBOX_POLL_MS: 500,
      OUTBOX_BATCH_SIZE: 500,
      FAULT_KILL_BEFORE_PUBLISH: false,
    });
  });

  it('takes a replication factor for the topics it creates from 1 to 32', () => {
    expect(loadConfig(BaseConfig, { ...validEnv, KAFKA_TOPIC_REPLICATION_FACTOR: '3' }).KAFKA_TOPIC_REPLICATION_FACTOR).toBe(3);
    for (const bad of ['0', '33', '1.5']) expect(failure({ ...validEnv, KAFKA_TOPIC_REPLICATION_FACTOR: bad }).message).toMatch(/KAFKA_TOPIC_REPLICATION_FACTOR/);
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

  it('waits up to 50 ms for 64 KiB per fetch by default, and refuses a wait of 0 or over 30 s', () => {
    expect(loadConfig(BaseConfig, validEnv)).toMatchObject({ KAFKA_FETCH_MIN_BYTES: 65_536, KAFKA_FETCH_MAX_WAIT_MS: 50 });
    expect(loadConfig(BaseConfig, { ...validEnv, KAFKA_FETCH_MIN_BYTES: '1', KAFKA_FETCH_MAX_WAIT_MS: '4000' })).toMatchObject({ KAFKA_FETCH_MIN_BYTES: 1, KAFKA_FETCH_MAX_WAIT_MS: 4000 });
    const names = (failure({ ...validEnv, KAFKA_FETCH_MIN_BYTES: '0', KAFKA_FETCH_MAX_WAIT_MS: '4001' }).details as string[]).map((p) => p.split(':')[0]);
    expect(names.sort()).toEqual(['KAFKA_FETCH_MAX_WAIT_MS', 'KAFKA_FETCH_MIN_BYTES']);
  });

  it('long-polls a quiet consumer after 40 empty fetches (2 s of silence) for up to 250 ms by default, off with a wait of 0, and refuses a run of 0 empty fetches', () => {
    expect(loadConfig(BaseConfig, validEnv)).toMatchObject({ KAFKA_FETCH_IDLE_WAIT_MS: 250, KAFKA_FETCH_IDLE_AFTER_EMPTY: 40 });
    expect(loadConfig(BaseConfig, { ...validEnv, KAFKA_FETCH_IDLE_WAIT_MS: '0' })).toMatchObject({ KAFKA_FETCH_IDLE_WAIT_MS: 0 });
    const names = (failure({ ...validEnv, KAFKA_FETCH_IDLE_WAIT_MS: '4001', KAFKA_FETCH_IDLE_AFTER_EMPTY: '0' }).details as string[]).map((p) => p.split(':')[0]);
    expect(names.sort()).toEqual(['KAFKA_FETCH_IDLE_AFTER_EMPTY', 'KAFKA_FETCH_IDLE_WAIT_MS']);
  });

  it('analyzes stale tables every 10 s by default, takes 0 as never, and refuses a negative or fractional interval', () => {
    expect(loadConfig(BaseConfig, validEnv)).toMatchObject({ DB_UPKEEP_INTERVAL_MS: 10_000 });
    expect(loadConfig(BaseConfig, { ...validEnv, DB_UPKEEP_INTERVAL_MS: '0' })).toMatchObject({ DB_UPKEEP_INTERVAL_MS: 0 });
    for (const bad of ['-1', '1.5', '3600001', 'often']) {
      expect((failure({ ...validEnv, DB_UPKEEP_INTERVAL_MS: bad }).details as string[]).map((p) => p.split(':')[0]), bad).toEqual(['DB_UPKEEP_INTERVAL_MS']);
    }
  });

  it('looks into a database statement unanswered for 10 s by default, takes 0 as off, and refuses a bound under a second', () => {
    expect(loadConfig(BaseConfig, validEnv)).toMatchObject({ DB_STALL_MS: 10_000 });
    expect(loadConfig(BaseConfig, { ...validEnv, DB_STALL_MS: '0' })).toMatchObject({ DB_STALL_MS: 0 });
    expect(loadConfig(BaseConfig, { ...validEnv, DB_STALL_MS: '1000' })).toMatchObject({ DB_STALL_MS: 1_000 });
    for (const bad of ['1', '999', '-1', '1.5', '3600001', 'soon']) {
      expect((failure({ ...validEnv, DB_STALL_MS: bad }).details as string[]).map((p) => p.split(':')[0]), bad).toEqual(['DB_STALL_MS']);
    }
  });

  it('leaves the heap growth to V8 by default, takes a percent, and refuses a negative, fractional or huge one', () => {
    expect(loadConfig(BaseConfig, validEnv)).toMatchObject({ HEAP_GROWING_PERCENT: 0 });
    expect(loadConfig(BaseConfig, { ...validEnv, HEAP_GROWING_PERCENT: '100' })).toMatchObject({ HEAP_GROWING_PERCENT: 100 });
    for (const bad of ['-1', '1.5', '301', 'lots']) {
      expect((failure({ ...validEnv, HEAP_GROWING_PERCENT: bad }).details as string[]).map((p) => p.split(':')[0]), bad).toEqual(['HEAP_GROWING_PERCENT']);
    }
  });

  it('caps token lifetimes at a day by default, takes another cap, and refuses one under a minute or over 30 days', () => {
    expect(loadConfig(BaseConfig, validEnv)).toMatchObject({ AUTH_MAX_TOKEN_LIFETIME_S: 86_400 });
    expect(loadConfig(BaseConfig, { ...validEnv, AUTH_MAX_TOKEN_LIFETIME_S: '3600' })).toMatchObject({ AUTH_MAX_TOKEN_LIFETIME_S: 3_600 });
    for (const bad of ['59', '2592001', 'forever']) {
      expect((failure({ ...validEnv, AUTH_MAX_TOKEN_LIFETIME_S: bad }).details as string[]).map((p) => p.split(':')[0]), bad).toEqual(['AUTH_MAX_TOKEN_LIFETIME_S']);
    }
  });

  it('trusts the local development issuer only where NODE_ENV says development or test, since anyone with the checkout can mint its tokens', () => {
    const dev = { ...validEnv, AUTH_ISSUER: 'labelflow-dev' };
    for (const NODE_ENV of ['development', 'test']) expect(loadConfig(BaseConfig, { ...dev, NODE_ENV })).toMatchObject({ AUTH_ISSUER: 'labelflow-dev' });
    const problem = (nodeEnv: string) => `AUTH_ISSUER: "labelflow-dev" is the local development identity (npm run token), accepted only with NODE_ENV=development or test (NODE_ENV is ${nodeEnv}); give the identity provider's issuer and keys`;
    expect(failure({ ...dev, NODE_ENV: 'production' }).details).toEqual([problem('"production"')]);
    expect(failure(dev).details).toEqual([problem('unset')]);
  });

  it('takes a development shared secret only where NODE_ENV says development or test', () => {
    const secret = 'a-development-secret-of-at-least-32-bytes';
    for (const NODE_ENV of ['development', 'test']) expect(loadConfig(BaseConfig, { ...validEnv, AUTH_DEV_SHARED_SECRET: secret, NODE_ENV })).toMatchObject({ AUTH_DEV_SHARED_SECRET: secret });
    const refused = failure({ ...validEnv, AUTH_DEV_SHARED_SECRET: secret, NODE_ENV: 'production' });
    expect(refused.details).toEqual(['AUTH_DEV_SHARED_SECRET: accepted only with NODE_ENV=development or test (NODE_ENV is "production"); give the identity provider\'s public keys']);
    expect(failure({ ...validEnv, AUTH_DEV_SHARED_SECRET: secret }).details).toEqual(['AUTH_DEV_SHARED_SECRET: accepted only with NODE_ENV=development or test (NODE_ENV is unset); give the identity provider\'s public keys']);
    expect(loadConfig(BaseConfig, { ...validEnv, NODE_ENV: 'production' })).toMatchObject({ NODE_ENV: 'production' });
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

describe('service-kit: Kafka SASL and TLS settings', () => {
  const sasl = { KAFKA_SASL_MECHANISM: 'scram-sha-512', KAFKA_SASL_USERNAME: 'labelflow', KAFKA_SASL_PASSWORD: 's3cret-pw' };
  /** The Kafka security problems loadConfig reports for validEnv plus `env` (other settings' problems are not this block's concern). */
  const kafkaProblems = (env: Record<string, string | undefined>): string[] => {
    try {
      loadConfig(BaseConfig, { ...validEnv, ...env });
      return [];
    } catch (error) {
      return ((error as ServiceKitError).details as string[]).filter((p) => /^KAFKA_(SASL|SSL)/.test(p));
    }
  };
  const parseKafkaSecurity = (env: Record<string, string>) => z.object(KafkaSecurityShape).parse(env);

  it('accepts an environment without any SASL variable and connects without TLS', () => {
    expect(kafkaProblems({})).toEqual([]);
    expect(kafkaSecurity(parseKafkaSecurity({}))).toEqual({ ssl: false });
  });

  it('accepts mechanism, username and password together and hands them to createKafka', () => {
    expect(kafkaProblems(sasl)).toEqual([]);
    expect(kafkaSecurity(parseKafkaSecurity({ ...sasl, KAFKA_SSL: '1' }))).toEqual({
      sasl: { mechanism: 'scram-sha-512', username: 'labelflow', password: 's3cret-pw' },
      ssl: true,
    });
  });

  it('refuses a SASL username and password without a mechanism, naming the missing variable', () => {
    expect(kafkaProblems({ ...sasl, KAFKA_SASL_MECHANISM: undefined })).toEqual([expect.stringMatching(/^KAFKA_SASL_MECHANISM: required when KAFKA_SASL_USERNAME, KAFKA_SASL_PASSWORD are set/)]);
  });

  it('refuses a mechanism alone, naming both missing variables', () => {
    expect(kafkaProblems({ KAFKA_SASL_MECHANISM: 'scram-sha-512' })).toEqual([expect.stringMatching(/^KAFKA_SASL_USERNAME, KAFKA_SASL_PASSWORD: required when KAFKA_SASL_MECHANISM is set/)]);
  });

  it('refuses an empty or blank password in the environment instead of sending it', () => {
    expect(kafkaProblems({ ...sasl, KAFKA_SASL_PASSWORD: '' })).toEqual([expect.stringMatching(/^KAFKA_SASL_PASSWORD: required/)]);
    expect(kafkaProblems({ ...sasl, KAFKA_SASL_PASSWORD: '   ' })).toEqual([expect.stringMatching(/^KAFKA_SASL_PASSWORD: required/)]);
  });

  it('refuses an empty password handed over as a parsed config', () => {
    expect(kafkaSecurityProblems(parseKafkaSecurity({ ...sasl, KAFKA_SASL_PASSWORD: '' }))).toEqual(['KAFKA_SASL_PASSWORD: an empty password is refused']);
    expect(kafkaSecurityProblems(parseKafkaSecurity({ ...sasl, KAFKA_SASL_USERNAME: ' ' }))).toEqual(['KAFKA_SASL_USERNAME: must not be empty']);
  });

  it('refuses an unknown mechanism and a KAFKA_SSL other than 0 or 1', () => {
    const problems = kafkaProblems({ ...sasl, KAFKA_SASL_MECHANISM: 'gssapi', KAFKA_SSL: 'yes' });
    expect(problems.map((p) => p.split(':')[0]).sort()).toEqual(['KAFKA_SASL_MECHANISM', 'KAFKA_SSL']);
  });
});
