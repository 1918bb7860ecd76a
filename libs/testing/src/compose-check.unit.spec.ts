import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { describe, expect, it } from 'vitest';
import { repoRoot } from './infra';

// The check is a plain node script of infra/ (outside every project), loaded by path; its types
// come from check-compose.d.mts beside it.
type Checker = typeof import('../../../infra/local/check-compose.mjs');
const { checkCompose, checkComposeText, mayBeEmpty, parseCompose, urlCredentials } = (await import(
  pathToFileURL(join(repoRoot, 'infra/local/check-compose.mjs')).href
)) as Checker;

type Service = Record<string, unknown>;
type Doc = { services: Record<string, Service> };

const composeText = readFileSync(join(repoRoot, 'infra/docker-compose.yml'), 'utf8');
/** A fresh copy of the real compose file, parsed, to break one thing in. */
const realDoc = (): Doc => parseCompose(composeText) as Doc;

/** A small stack that passes: every fixture below breaks exactly one thing of it. */
const goodDoc = (): Doc => ({
  services: {
    postgres: {
      image: 'postgres:16',
      environment: { POSTGRES_PASSWORD: '${POSTGRES_PASSWORD:?required}', POSTGRES_HOST_AUTH_METHOD: 'scram-sha-256' },
    },
    redis: { image: 'redis:7', command: ['redis-server', '--aclfile', '/data/users.acl'] },
    kafka: {
      image: 'apache/kafka:3.9.1',
      environment: {
        KAFKA_LISTENERS: 'INTERNAL://0.0.0.0:9092,CONTROLLER://127.0.0.1:9093',
        KAFKA_LISTENER_SECURITY_PROTOCOL_MAP: 'INTERNAL:SASL_PLAINTEXT,CONTROLLER:PLAINTEXT',
      },
    },
    'task-svc': {
      ports: ['3001:3001'],
      environment: {
        DATABASE_URL: 'postgres://labelflow:${PG_APP_PASSWORD:?run npm run compose:env first}@postgres:5432/task_svc',
        REDIS_URL: 'redis://labelflow:${REDIS_PASSWORD:?required}@redis:6379',
        KAFKA_BROKERS: 'kafka:9092',
        KAFKA_SASL_MECHANISM: 'scram-sha-512',
        KAFKA_SASL_USERNAME: 'labelflow',
        KAFKA_SASL_PASSWORD: '${KAFKA_SASL_PASSWORD:?required}',
      },
    },
  },
});
const withService = (doc: Doc, name: string, change: (s: Service) => void): Doc => {
  const service = doc.services[name] ?? {};
  change(service);
  doc.services[name] = service;
  return doc;
};
const env = (s: Service) => s.environment as Record<string, unknown>;
const problemsOf = (doc: Doc) => checkCompose(doc);

describe('compose security check', () => {
  it('passes the real infra/docker-compose.yml', () => {
    expect(checkComposeText(composeText)).toEqual([]);
  });

  it('passes the small reference stack the fixtures are made from', () => {
    expect(problemsOf(goodDoc())).toEqual([]);
  });

  it('flags an infrastructure port published by default, and names the service and port', () => {
    const problems = problemsOf(withService(goodDoc(), 'postgres', (s) => (s.ports = ['5432:5432'])));
    expect(problems).toEqual([expect.stringMatching(/^postgres: infrastructure service publishes 5432:5432 by default/)]);
  });

  it('accepts an infrastructure port behind a non-default profile', () => {
    expect(problemsOf(withService(goodDoc(), 'postgres', (s) => Object.assign(s, { ports: ['127.0.0.1:5432:5432'], profiles: ['infra-ports'] })))).toEqual([]);
  });

  it('flags a forwarder of the real file once its opt-in profile is removed', () => {
    const problems = problemsOf(withService(realDoc(), 'redis-port', (s) => delete s.profiles));
    expect(problems).toEqual([expect.stringMatching(/^redis-port: infrastructure service publishes 127\.0\.0\.1:6379:6379 by default/)]);
  });

  it('flags a port in the long syntax that "docker-compose config" prints', () => {
    const problems = problemsOf(withService(goodDoc(), 'redis', (s) => (s.ports = [{ published: 6379, target: 6379 }])));
    expect(problems).toEqual([expect.stringMatching(/^redis: infrastructure service publishes 6379->6379 by default/)]);
  });

  it("flags an infrastructure service on the host's network", () => {
    expect(problemsOf(withService(goodDoc(), 'redis', (s) => (s.network_mode = 'host')))).toEqual([expect.stringMatching(/^redis: .*host's network/)]);
  });

  it('flags POSTGRES_HOST_AUTH_METHOD=trust', () => {
    const problems = problemsOf(withService(goodDoc(), 'postgres', (s) => (env(s).POSTGRES_HOST_AUTH_METHOD = 'trust')));
    expect(problems).toEqual([expect.stringMatching(/^postgres: POSTGRES_HOST_AUTH_METHOD=trust/)]);
  });

  it('flags trust in the initdb arguments and in a pg_hba rule written by the command', () => {
    const initdb = problemsOf(withService(goodDoc(), 'postgres', (s) => (env(s).POSTGRES_INITDB_ARGS = '--auth-host=trust')));
    expect(initdb).toEqual([expect.stringMatching(/^postgres: POSTGRES_INITDB_ARGS sets trust/)]);
    const hba = problemsOf(withService(goodDoc(), 'postgres', (s) => (s.command = ['sh', '-c', 'echo "host all all all trust" >> /var/lib/postgresql/data/pg_hba.conf'])));
    expect(hba).toEqual([expect.stringMatching(/^postgres: its command writes a trust pg_hba rule/)]);
  });

  it('flags ALLOW_EMPTY_PASSWORD given in the list form of environment', () => {
    const problems = problemsOf(withService(goodDoc(), 'redis', (s) => (s.environment = ['ALLOW_EMPTY_PASSWORD=yes'])));
    expect(problems).toEqual([expect.stringMatching(/^redis: ALLOW_EMPTY_PASSWORD=yes allows an empty password/)]);
  });

  it('flags a Redis without an ACL file or password, and an ACL user with nopass', () => {
    const open = problemsOf(withService(goodDoc(), 'redis', (s) => (s.command = ['redis-server', '--save', ''])));
    expect(open).toEqual([expect.stringMatching(/^redis: Redis runs without --aclfile or --requirepass/)]);
    const nopass = problemsOf(withService(goodDoc(), 'redis', (s) => (s.command = ['sh', '-c', "echo 'user app on nopass ~* +@all' > a.acl && redis-server --aclfile a.acl"])));
    expect(nopass).toEqual([expect.stringMatching(/^redis: a Redis ACL user with nopass/)]);
  });

  it('flags password variables that are empty or may be empty after interpolation', () => {
    for (const value of ['', '${POSTGRES_PASSWORD}', '${POSTGRES_PASSWORD:-}', '${POSTGRES_PASSWORD-fallback}', '$POSTGRES_PASSWORD', null]) {
      const problems = problemsOf(withService(goodDoc(), 'postgres', (s) => (env(s).POSTGRES_PASSWORD = value)));
      expect(problems, `POSTGRES_PASSWORD: ${JSON.stringify(value)}`).toEqual([expect.stringMatching(/^postgres: POSTGRES_PASSWORD /)]);
    }
  });

  it('flags a URL with a user but no password, with a possibly empty password, or without credentials', () => {
    const cases: [string, RegExp][] = [
      ['postgres://postgres@postgres:5432/task_svc', /DATABASE_URL has user "postgres" without a password/],
      ['postgres://labelflow:${PG_APP_PASSWORD}@postgres:5432/task_svc', /DATABASE_URL has user "labelflow" with an empty \(or possibly empty\) password/],
      ['postgres://labelflow:@postgres:5432/task_svc', /DATABASE_URL has user "labelflow" with an empty/],
      ['postgres://postgres:5432/task_svc', /DATABASE_URL \(postgres:\/\/\) carries no credentials/],
    ];
    for (const [url, expected] of cases) {
      const problems = problemsOf(withService(goodDoc(), 'task-svc', (s) => (env(s).DATABASE_URL = url)));
      expect(problems, url).toEqual([expect.stringMatching(new RegExp(`^task-svc: ${expected.source}`))]);
    }
  });

  it('flags a Kafka listener that speaks PLAINTEXT on a non-loopback address', () => {
    const problems = problemsOf(withService(goodDoc(), 'kafka', (s) => (env(s).KAFKA_LISTENER_SECURITY_PROTOCOL_MAP = 'INTERNAL:PLAINTEXT,CONTROLLER:PLAINTEXT')));
    expect(problems).toEqual([expect.stringMatching(/^kafka: listener INTERNAL:\/\/0\.0\.0\.0:9092 is PLAINTEXT/)]);
  });

  it("flags a Kafka left on the image's default PLAINTEXT listener", () => {
    const problems = problemsOf(withService(goodDoc(), 'kafka', (s) => delete s.environment));
    expect(problems).toEqual([expect.stringMatching(/^kafka: no SASL listener configured/)]);
  });

  it('flags the real Kafka service once its SASL password is removed', () => {
    const problems = problemsOf(withService(realDoc(), 'kafka', (s) => delete env(s).KAFKA_SASL_PASSWORD));
    expect(problems).toEqual([expect.stringMatching(/^kafka: start-sasl\.sh needs KAFKA_SASL_PASSWORD/)]);
  });

  it('flags an app service that connects to Kafka without SASL', () => {
    const problems = problemsOf(withService(goodDoc(), 'task-svc', (s) => delete env(s).KAFKA_SASL_MECHANISM));
    expect(problems).toEqual([expect.stringMatching(/^task-svc: connects to Kafka without SASL/)]);
  });

  it('lists every problem of a file at once, through YAML anchors and merge keys', () => {
    const text = [
      'x-env: &env',
      '  REDIS_URL: redis://redis:6379',
      '  KAFKA_BROKERS: kafka:9092',
      'services:',
      '  redis:',
      '    image: redis:7',
      '    ports: ["6379:6379"]',
      '  task-svc:',
      '    environment:',
      '      <<: *env',
      '      DATABASE_URL: postgres://labelflow:${PW:?x}@postgres/task_svc',
    ].join('\n');
    expect(checkComposeText(text)).toEqual([
      expect.stringMatching(/^redis: infrastructure service publishes 6379:6379/),
      expect.stringMatching(/^redis: Redis runs without --aclfile/),
      expect.stringMatching(/^task-svc: REDIS_URL \(redis:\/\/\) carries no credentials/),
      expect.stringMatching(/^task-svc: connects to Kafka without SASL/),
    ]);
  });

  it('treats only ${VAR:?message} and a non-empty ${VAR:-default} as never empty', () => {
    expect(mayBeEmpty('${PW:?run npm run compose:env first}')).toBe(false);
    expect(mayBeEmpty('${PW:-fallback}')).toBe(false);
    expect(mayBeEmpty('literal')).toBe(false);
    expect(mayBeEmpty('${PW?unset only}')).toBe(true);
    expect(mayBeEmpty('${PW:+x}')).toBe(true);
    expect(mayBeEmpty('$$')).toBe(false);
  });

  it('reads URL credentials without being confused by the text of an interpolation', () => {
    expect(urlCredentials('redis://labelflow:${REDIS_PASSWORD:?run npm run compose:env first}@redis:6379')).toEqual({
      scheme: 'redis',
      user: 'labelflow',
      password: expect.any(String),
      passwordMayBeEmpty: false,
    });
    expect(urlCredentials('http://example.com/x')).toBeNull();
  });
});
