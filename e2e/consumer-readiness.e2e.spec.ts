import { afterEach, describe, expect, inject, it } from 'vitest';
import {
  authEnv,
  createTestDatabase,
  eventually,
  holdConsumerGroup,
  httpClient,
  metricValue,
  startServiceProcess,
  uniqueName,
  type HeldGroup,
  type ServiceProcess,
} from '@labelflow/testing';

interface Readiness {
  readonly status: string;
  readonly checks: Readonly<Record<string, string>>;
}

describe('readiness of a service whose consumer crashed', () => {
  const infra = inject('infra');
  const cleanups: (() => Promise<void>)[] = [];
  afterEach(async () => {
    for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
  });

  it('answers /readyz 503 naming the crash while the consumer is down, and 200 once it restarted itself', async () => {
    const prefix = uniqueName('lf');
    const db = await createTestDatabase(infra.pgUrl, `${prefix}_task_svc`);
    cleanups.push(db.drop);
    // Another application holds task-svc's consumer group with an assignor task-svc does not offer:
    // the broker refuses task-svc's JoinGroup, and kafkajs crashes its consumer for good.
    let foreign: HeldGroup | undefined = await holdConsumerGroup(infra.kafkaBrokers, `${prefix}.task-svc`);
    cleanups.push(async () => foreign?.release());
    const service: ServiceProcess = await startServiceProcess('task-svc', {
      ...(await authEnv()),
      KAFKA_BROKERS: infra.kafkaBrokers,
      REDIS_URL: infra.redisUrl,
      DATABASE_URL: db.url,
      KAFKA_TOPIC_PREFIX: prefix,
      KAFKA_TOPIC_PARTITIONS: '1',
    });
    cleanups.push(() => service.stop());
    const http = httpClient(service.url, undefined, { serverErrors: 'return' });

    const down = await http.get<Readiness>('/readyz');
    expect(down.status).toBe(503);
    expect(down.body.status).toBe('not ready');
    expect(down.body.checks).toMatchObject({ postgres: 'ok', kafka: 'ok' });
    expect(down.body.checks['consumer']).toMatch(/^down: the consumer crashed .*incompatible with those of existing members.*restart \d+/);
    // Alive all the same: nothing to gain from killing the process.
    expect((await http.get('/healthz')).status).toBe(200);

    await foreign.release();
    foreign = undefined;
    const up = await eventually(async () => {
      const res = await http.get<Readiness>('/readyz');
      expect(res.status).toBe(200);
      return res;
    });
    expect(up.body.checks['consumer']).toBe('ok');
    const metrics = (await http.get<string>('/metrics')).body;
    expect(metricValue(metrics, 'consumer_crashes_total', { restart: 'loop' })).toBeGreaterThanOrEqual(1);
    expect(metricValue(metrics, 'consumer_running')).toBe(1);
    expect(service.logs()).toContain('consumer crashed and kafkajs will not restart it; restarting it');
  });
});
