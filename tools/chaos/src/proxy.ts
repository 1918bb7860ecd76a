import { Agent, createServer, request as httpRequest, type IncomingMessage, type Server, type ServerResponse } from 'node:http';

/**
 * A stable front door for one service, like the load balancer in front of a deployment. The
 * service gets a new port on every start (libs/testing starts it with PORT=0), so the simulated
 * users talk to this proxy, which forwards each request to wherever the service runs now.
 *
 * - While the service is down (killed, restarting), a request waits here until it is back (at most
 *   `holdMs`), the way a load balancer holds or retries a request that never reached a backend:
 *   nothing of it reached the service, so sending it later is safe.
 * - If the service dies while it holds the request, the client's connection is dropped, exactly
 *   what the client would see without the proxy; the client retries with the same Idempotency-Key.
 * - A paused service is not down: its requests wait in its socket until it runs again.
 */
export interface ServiceProxy {
  readonly url: string;
  /** Requests forwarded, requests held while the service was down, client connections dropped. */
  stats(): { readonly forwarded: number; readonly held: number; readonly dropped: number };
  close(): Promise<void>;
}

export interface ProxyOptions {
  /** The service's current base URL, or undefined while it is down. */
  readonly target: () => string | undefined;
  readonly holdMs?: number;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const refused = (error: unknown) => ['ECONNREFUSED', 'EADDRNOTAVAIL'].includes((error as { code?: string }).code ?? '');

export async function startProxy({ target, holdMs = 60_000 }: ProxyOptions): Promise<ServiceProxy> {
  let forwarded = 0;
  let held = 0;
  let dropped = 0;
  const agents = new Map<string, Agent>();
  const agentFor = (base: string) => {
    let agent = agents.get(base);
    if (!agent) {
      // Old backends' agents are dropped: their sockets point at a dead process.
      for (const [b, a] of agents) {
        if (b === base) continue;
        a.destroy();
        agents.delete(b);
      }
      agent = new Agent({ keepAlive: true, maxSockets: 256, keepAliveMsecs: 1_000 });
      agents.set(base, agent);
    }
    return agent;
  };

  /** Sends once; resolves 'refused' when the request never reached the service. */
  const forwardOnce = (base: string, req: IncomingMessage, body: Buffer, res: ServerResponse) =>
    new Promise<'done' | 'refused'>((resolve) => {
      const url = new URL(req.url ?? '/', base);
      const upstream = httpRequest(url, { method: req.method, headers: { ...req.headers, host: url.host }, agent: agentFor(base) }, (answer) => {
        res.writeHead(answer.statusCode ?? 502, answer.headers);
        answer.pipe(res);
        answer.on('error', () => res.destroy());
        answer.on('aborted', () => res.destroy());
        res.on('close', () => resolve('done'));
      });
      upstream.on('error', (error) => {
        if (refused(error) && !res.headersSent) return resolve('refused');
        // It may have reached the service: only the client may decide to send it again.
        dropped++;
        res.destroy();
        resolve('done');
      });
      upstream.end(body);
    });

  const handle = async (req: IncomingMessage, res: ServerResponse) => {
    const chunks: Buffer[] = [];
    for await (const chunk of req) chunks.push(chunk as Buffer);
    const body = Buffer.concat(chunks);
    const until = Date.now() + holdMs;
    let wasHeld = false;
    for (;;) {
      const base = target();
      if (base !== undefined && (await forwardOnce(base, req, body, res)) === 'done') {
        forwarded++;
        return;
      }
      if (!wasHeld) {
        wasHeld = true;
        held++;
      }
      if (Date.now() > until || res.destroyed) {
        dropped++;
        res.destroy();
        return;
      }
      await sleep(100);
    }
  };

  const server: Server = createServer((req, res) => void handle(req, res).catch(() => res.destroy()));
  // Long polls (Prefer: wait) and requests held during a restart must not be cut by the server.
  server.requestTimeout = 0;
  server.headersTimeout = 0;
  server.keepAliveTimeout = 5_000;
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => resolve());
  });
  const address = server.address();
  if (typeof address !== 'object' || address === null) throw new Error('proxy has no address');
  return {
    url: `http://127.0.0.1:${address.port}`,
    stats: () => ({ forwarded, held, dropped }),
    close: async () => {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
      for (const a of agents.values()) a.destroy();
    },
  };
}
