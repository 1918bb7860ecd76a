import type pg from 'pg';
import { afterAll, beforeAll, beforeEach, describe, expect, inject, it } from 'vitest';
import { createPool, Lifecycle, migrate } from '@labelflow/service-kit';
import { createLogger, createMetrics } from '@labelflow/telemetry';
import { eventually, freshDatabase } from '@labelflow/testing';
import { migrations } from '../migrations';
import { drainOnce, sagaMetrics } from './notices';
import { leaseWebhooks } from './repository';
import { createWebhook, type Webhook } from './webhook';
import { relayWebhooksOnce, startWebhookRelay } from './webhook-relay';

const infra = inject('infra');
const logger = createLogger({ service: 'saga-monitor', level: 'silent' });

/** A receiver answering each post with the next status (200 once they run out), recording the bodies. */
function receiver(...answers: number[]) {
  const bodies: Record<string, unknown>[] = [];
  const fetch = (async (_url: string, init: RequestInit) => {
    bodies.push(JSON.parse(String(init.body)) as Record<string, unknown>);
    return new Response(null, { status: answers.shift() ?? 200 });
  }) as typeof globalThis.fetch;
  return { fetch, bodies };
}

describe('saga monitor: webhook posts queued with their notices', () => {
  let pool: pg.Pool;
  const db = freshDatabase(infra.pgUrl, 'monitorhooks', (p) => migrate(p, migrations), { pool: (url) => createPool(url, { max: 3 }) });
  beforeAll(async () => void (pool = await db.open()));
  afterAll(() => db.close());
  beforeEach(async () => void (await pool.query('TRUNCATE saga_notices, saga_webhooks')));

  const notice = (kind: string, body: Record<string, unknown>) => pool.query('INSERT INTO saga_notices (kind, body) VALUES ($1, $2) RETURNING id', [kind, body]).then((r) => String(r.rows[0].id));
  const alert = (taskId: string, extra: Record<string, unknown> = {}) => ({ taskId, step: 'qa_started', attempt: 1, dueAt: '2030-01-01T00:00:00.000Z', ...extra });
  const drain = (queueWebhooks: boolean) => drainOnce({ pool, logger, metrics: createMetrics({ service: 't', defaults: false }), queueWebhooks, everyMs: 1_000 }, sagaMetrics(createMetrics({ service: 't', defaults: false })));
  const queued = async () => (await pool.query<{ id: string; leased: boolean }>('SELECT id::text, leased_until IS NOT NULL AS leased FROM saga_webhooks ORDER BY id')).rows;
  const relay = (webhook: Webhook) => relayWebhooksOnce({ pool, webhook, logger, everyMs: 1_000, leaseMs: 60_000 });

  it('queues a post for each alert raised or resolved in the statement that takes its notice, and none for the other notices', async () => {
    const fired = await notice('alert', alert('1'));
    await notice('latency', { from: 'LabelSubmitted', to: 'QaStarted', seconds: 1 });
    const resolved = await notice('resolved', alert('1', { cause: 'arrived' }));

    expect(await drain(true)).toBe(3);

    expect(await queued()).toEqual([{ id: fired, leased: false }, { id: resolved, leased: false }]);
    const { rows } = await pool.query<{ body: Record<string, unknown> }>('SELECT body FROM saga_webhooks ORDER BY id');
    expect(rows.map((r) => r.body)).toEqual([{ ...alert('1'), status: 'firing', id: fired }, { ...alert('1', { cause: 'arrived' }), status: 'resolved', id: resolved }]);
  });

  it('queues nothing without a webhook configured', async () => {
    await notice('alert', alert('1'));
    await drain(false);
    expect(await queued()).toEqual([]);
  });

  it('posts what a crash left queued and leased, once the lease has run out, and then forgets it', async () => {
    const fired = await notice('alert', alert('7'));
    await drain(true);
    // The instance that leased it died before posting, and its lease has run out since.
    expect(await leaseWebhooks(pool, 10, 60_000)).toHaveLength(1);
    expect(await leaseWebhooks(pool, 10, 60_000)).toEqual([]);
    await pool.query(`UPDATE saga_webhooks SET leased_until = now() - interval '1 second'`);
    const { fetch, bodies } = receiver(204);

    expect(await relay(createWebhook({ url: 'http://hook.test/', attempts: 3, timeoutMs: 1_000, logger, fetch, backoffMs: () => 1 }))).toBe(1);

    expect(bodies).toEqual([{ ...alert('7'), status: 'firing', id: fired }]);
    expect(await queued()).toEqual([]);
  });

  it('leases no more posts at once than the webhook sends at once, so none waits for a slot while its lease runs out', async () => {
    for (let task = 1; task <= 14; task++) await notice('alert', alert(String(task)));
    await drain(true);
    const { fetch, bodies } = receiver();
    const webhook = createWebhook({ url: 'http://hook.test/', attempts: 1, timeoutMs: 1_000, logger, fetch, concurrency: 4 });

    expect(await relayWebhooksOnce({ pool, webhook, logger, everyMs: 1_000, leaseMs: 60_000, batch: 4 })).toBe(4);
    expect(bodies).toHaveLength(4);
    // By default as many as the webhook's default concurrency (WEBHOOK_CONCURRENCY, 8).
    expect(await relay(createWebhook({ url: 'http://hook.test/', attempts: 1, timeoutMs: 1_000, logger, fetch }))).toBe(8);
    expect(await queued()).toHaveLength(2);
  });

  it('keeps its slots full while one post is held: the others go on through the queue, and the held one is handed back at close', async () => {
    const held = await notice('alert', alert('1'));
    for (let task = 2; task <= 7; task++) await notice('alert', alert(String(task)));
    await drain(true);
    const bodies: Record<string, unknown>[] = [];
    // The first post is refused for now and waits a minute before its next try; every other one is taken at once.
    const fetch = (async (_url: string, init: RequestInit) => {
      const body = JSON.parse(String(init.body)) as Record<string, unknown>;
      bodies.push(body);
      return new Response(null, { status: body.id === held ? 503 : 204 });
    }) as typeof globalThis.fetch;
    const webhook = createWebhook({ url: 'http://hook.test/', attempts: 3, timeoutMs: 1_000, logger, fetch, concurrency: 2, backoffMs: () => 60_000 });
    const lifecycle = new Lifecycle(logger);
    startWebhookRelay({ pool, webhook, logger, everyMs: 50, leaseMs: 60_000, batch: 2 }, lifecycle);
    // With two slots and one of them held, the other six posts still go, one after another.
    await eventually(async () => expect(await queued()).toEqual([{ id: held, leased: true }]));
    expect(bodies).toHaveLength(7);
    await lifecycle.close();
    expect(await queued()).toEqual([{ id: held, leased: false }]);
  });

  it("leases an alert's resolution only once its firing is gone, while other alerts go meanwhile", async () => {
    const firing = await notice('alert', alert('1'));
    const resolved = await notice('resolved', alert('1', { cause: 'arrived' }));
    const other = await notice('alert', alert('2'));
    await drain(true);

    expect((await leaseWebhooks(pool, 10, 60_000)).map((w) => w.id)).toEqual([firing, other]);
    await pool.query('DELETE FROM saga_webhooks WHERE id = ANY($1::bigint[])', [[firing, other]]);
    expect((await leaseWebhooks(pool, 10, 60_000)).map((w) => w.id)).toEqual([resolved]);
  });

  it('forgets a post the receiver refused for good, and hands back one the close cut short', async () => {
    await notice('alert', alert('1')); // answered 400: refused for good
    const cut = await notice('alert', alert('2'));
    await drain(true);
    const { fetch, bodies } = receiver(400, 503);
    const webhook = createWebhook({ url: 'http://hook.test/', attempts: 3, timeoutMs: 1_000, logger, fetch, backoffMs: () => 60_000 });
    const relayed = relay(webhook);
    // Both posts have been tried once: the 503 waits out its backoff when the monitor closes.
    await eventually(() => expect(bodies).toHaveLength(2));
    await webhook.close();
    await relayed;

    // The refused post is gone from the queue, the cut one is back in it, free for the next relay.
    expect(await queued()).toEqual([{ id: cut, leased: false }]);
  });
});
