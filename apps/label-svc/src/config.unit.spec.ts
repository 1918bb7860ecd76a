import { describe, expect, it } from 'vitest';
import { loadConfig } from '@labelflow/service-kit';
import { LabelSvcConfig } from './config';

const env = {
  KAFKA_BROKERS: 'localhost:9092',
  DATABASE_URL: 'postgres://u:p@localhost:5432/label',
  REDIS_URL: 'redis://localhost:6379',
  AUTH_ISSUER: 'https://idp.test',
  AUTH_AUDIENCE: 'labelflow',
  AUTH_JWKS_URL: 'https://idp.test/.well-known/jwks.json',
};

describe('label-svc: configuration', () => {
  it('writes the newest LabelSubmitted, version 2, unless told otherwise', () => {
    expect(loadConfig(LabelSvcConfig, env).LABEL_EVENT_VERSION).toBe(2);
  });

  it('writes version 1 with LABEL_EVENT_VERSION=1, for a gray release', () => {
    expect(loadConfig(LabelSvcConfig, { ...env, LABEL_EVENT_VERSION: '1' }).LABEL_EVENT_VERSION).toBe(1);
  });

  it.each(['0', '3', 'v2'])('refuses LABEL_EVENT_VERSION=%s naming the variable, since no reader could know it', (value) => {
    expect(() => loadConfig(LabelSvcConfig, { ...env, LABEL_EVENT_VERSION: value })).toThrow(/LABEL_EVENT_VERSION/);
  });
});
