// npm run bench:auth -- [--requests 20000] [--rounds 3]
// What authentication costs an HTTP command, in process (fastify inject, no sockets): the same
// trivial route with no hook (the ceiling), with token verification (cached after the first
// signature check) and the local rate limiter, and with the rate limiter in Redis (REDIS_URL), as
// the services run it. Prints a markdown table with each contender's ratio to the ceiling.
import Fastify, { type FastifyInstance } from 'fastify';
import { Redis } from 'ioredis';
import { createRateLimiter, createTokenVerifier, generateSigningKey, installAuth, issueToken } from '@labelflow/auth';
import { fmtRate, median, positiveInt, runBench } from './common';

const args = process.argv.slice(2);
const flag = (name: string) => {
  const i = args.indexOf(`--${name}`);
  return i >= 0 ? args[i + 1] : undefined;
};
const requests = positiveInt('requests', flag('requests') ?? '20000');
const rounds = positiveInt('rounds', flag('rounds') ?? '3');
const issuer = 'bench';
const audience = 'labelflow';

async function app(setup?: (app: FastifyInstance) => void): Promise<FastifyInstance> {
  const server = Fastify();
  setup?.(server);
  server.post('/things', async () => ({ ok: true }));
  await server.ready();
  return server;
}

async function rate(server: FastifyInstance, headers: Record<string, string>): Promise<number> {
  const started = process.hrtime.bigint();
  // 32 in flight, as a loaded service sees them.
  let next = 0;
  await Promise.all(
    Array.from({ length: 32 }, async () => {
      while (next++ < requests) {
        const res = await server.inject({ method: 'POST', url: '/things', headers, payload: { a: 1 } });
        if (res.statusCode !== 200) throw new Error(`answered ${res.statusCode}: ${res.body}`);
      }
    }),
  );
  return requests / (Number(process.hrtime.bigint() - started) / 1e9);
}

runBench('auth', async () => {
  const { privateJwk, publicJwks } = await generateSigningKey();
  const verifier = createTokenVerifier({ issuer, audience, jwks: publicJwks });
  const token = await issueToken({ jwk: privateJwk }, { issuer, audience, subject: 'bench-user', ttlS: 3600 });
  const redis = new Redis(process.env.REDIS_URL ?? 'redis://127.0.0.1:6379', { lazyConnect: true, maxRetriesPerRequest: 0, enableOfflineQueue: false });
  await redis.connect();
  const limits = { perSecond: 1e6, burst: 1e6 };
  const contenders: [string, FastifyInstance, Record<string, string>][] = [
    ['no authentication (ceiling)', await app(), {}],
    ['token + local rate limit', await app((s) => installAuth(s, { verifier, rateLimiter: createRateLimiter({ namespace: 'bench:rl', ...limits }) })), { authorization: `Bearer ${token}` }],
    ['token + Redis rate limit (as deployed)', await app((s) => installAuth(s, { verifier, rateLimiter: createRateLimiter({ namespace: `bench:rl:${Date.now()}`, redis, ...limits }) })), { authorization: `Bearer ${token}` }],
  ];
  const results = new Map<string, number[]>(contenders.map(([name]) => [name, []]));
  for (let r = 0; r < rounds; r++) for (const [name, server, headers] of contenders) results.get(name)!.push(await rate(server, headers));
  const ceiling = median(results.get(contenders[0]![0])!);
  console.log(`\n${requests} requests x ${rounds} rounds per contender, interleaved, 32 in flight (median round)\n`);
  console.log('| contender | requests/s | ratio to ceiling | µs added per request |');
  console.log('|---|---:|---:|---:|');
  for (const [name] of contenders) {
    const r = median(results.get(name)!);
    console.log(`| ${name} | ${fmtRate(r)} | ${(r / ceiling).toFixed(2)}x | ${Math.max(0, 1e6 / r - 1e6 / ceiling).toFixed(0)} |`);
  }
  for (const [, server] of contenders) await server.close();
  redis.disconnect();
  return 0;
});
