import { request as httpRequest, type IncomingHttpHeaders } from 'node:http';
import { request as httpsRequest } from 'node:https';
export interface Reply<T = unknown> {
  readonly status: number;
  readonly body: T;
}

export type Call = <T = unknown>(method: 'GET' | 'POST', path: string, body?: unknown, headers?: Record<string, string>) => Promise<Reply<T>>;

export interface ClientOptions {
  /** Per request; must exceed the longest `Prefer: wait` sent, or a long poll is cut short. */
  readonly timeoutMs?: number;
  readonly retries?: number;
  /** The `Authorization` header of every request (`Bearer <JWT>`), asked for each time it is sent. */
  readonly authorization?: () => Promise<string> | string;
  /** How long one request may spend waiting out 429 RATE_LIMITED answers in all. Default 120 s. */
  readonly rateLimitWaitMs?: number;
  /** Called for every HTTP request sent, retries included (the producer's requests-per-step). */
  readonly onRequest?: () => void;
  /** Called for every 429 RATE_LIMITED answer (each is waited out and the request sent again). */
  readonly onRateLimited?: () => void;
  /** Called for every 503 sent again: a dependency was away. Counted, so a run without faults can insist on none. */
  readonly onUnavailable?: () => void;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
/** `Retry-After` in seconds (the services send whole seconds), as milliseconds. */
const retryAfterMs = (response: Exchanged, fallbackS = 1) => {
  const raw = response.headers['retry-after'];
  const seconds = raw === undefined ? Number.NaN : Number(raw);
  return (Number.isFinite(seconds) && seconds >= 0 ? seconds : fallbackS) * 1000;
};

interface Exchanged {
  readonly status: number;
  readonly headers: IncomingHttpHeaders;
  readonly text: string;
}

/**
 * One request on node:http's keep-alive agent. The producer and `bench:saga` drive the stack from
 * the machine they measure: fetch took about 480 µs of CPU per request here, node:http about 180.
 */
function exchange(url: string, method: string, headers: Record<string, string>, body: string | undefined, timeoutMs: number): Promise<Exchanged> {
  return new Promise((resolve, reject) => {
    const send = url.startsWith('https:') ? httpsRequest : httpRequest;
    const sized = body === undefined ? headers : { ...headers, 'content-length': String(Buffer.byteLength(body)) };
    const request = send(url, { method, headers: sized, signal: AbortSignal.timeout(timeoutMs) }, (response) => {
      const chunks: Buffer[] = [];
      response.on('data', (chunk: Buffer) => chunks.push(chunk));
      response.on('end', () => resolve({ status: response.statusCode ?? 0, headers: response.headers, text: Buffer.concat(chunks).toString('utf8') }));
      response.on('error', reject);
    });
    request.on('error', reject);
    request.end(body);
  });
}

/**
 * A JSON client that sends an Idempotency-Key with every POST and, when a request times out, the
 * connection drops, the service answers 503, 409 CONCURRENT_UPDATE or 409 IDEMPOTENCY_KEY_IN_FLIGHT,
 * retries it with the SAME key: the server replays the first outcome instead of running the command
 * twice. A fresh key per retry is exactly the mistake this avoids.
 *
 * 429 RATE_LIMITED (too many requests from this caller) is a documented "not yet": nothing ran, so
 * the same request is sent again after `Retry-After` (plus a little jitter, so one subject's
 * requests do not all come back in the same instant), for up to `rateLimitWaitMs`, without
 * spending a retry.
 */
export function client(baseUrl: string, { timeoutMs = 10_000, retries = 5, authorization, rateLimitWaitMs = 120_000, onRequest, onRateLimited, onUnavailable }: ClientOptions = {}): Call {
  return async <T>(method: 'GET' | 'POST', path: string, body?: unknown, headers: Record<string, string> = {}): Promise<Reply<T>> => {
    const key = method === 'POST' ? crypto.randomUUID() : undefined;
    let limitedMs = 0;
    for (let attempt = 0; ; ) {
      let response: Awaited<ReturnType<typeof exchange>>;
      try {
        const auth = authorization ? { authorization: await authorization() } : undefined;
        onRequest?.();
        response = await exchange(
          `${baseUrl}${path}`,
          method,
          { ...(body !== undefined ? { 'content-type': 'application/json' } : {}), ...(key ? { 'idempotency-key': key } : {}), ...auth, ...headers },
          body === undefined ? undefined : JSON.stringify(body),
          timeoutMs,
        );
      } catch (error) {
        // No answer (a timeout, a dropped connection): the same request, same key, again.
        if (attempt >= retries) throw error;
        await sleep(100 * 2 ** attempt++);
        continue;
      }
      {
        // An answer that is not JSON (a proxy's HTML error page) is still an answer: its status is
        // returned with the text, never taken for a dropped connection and retried.
        const parsed = parseBody(response.text) as T;
        if (response.status === 429 && errorCode(parsed) === 'RATE_LIMITED' && limitedMs < rateLimitWaitMs) {
          onRateLimited?.();
          // At least 1 ms: `Retry-After: 0` and a jitter of 0 would add nothing to the tally, and
          // the budget would never run out.
          const wait = retryAfterMs(response) + 1 + Math.floor(Math.random() * 250);
          limitedMs += wait;
          await sleep(wait);
          continue;
        }
        // 503: a dependency is briefly away. 409 IDEMPOTENCY_KEY_IN_FLIGHT: an earlier try with this
        // key is still running. Both say when to come back; the same request, same key, will be answered.
        if ((response.status === 503 || (response.status === 409 && errorCode(parsed) === 'IDEMPOTENCY_KEY_IN_FLIGHT')) && attempt < retries) {
          if (response.status === 503) onUnavailable?.();
          attempt++;
          await sleep(retryAfterMs(response));
          continue;
        }
        // 409 CONCURRENT_UPDATE: the row kept changing while the command was decided, and nothing was applied.
        if (response.status === 409 && errorCode(parsed) === 'CONCURRENT_UPDATE' && attempt < retries) {
          await sleep(50 * 2 ** attempt++);
          continue;
        }
        return { status: response.status, body: parsed };
      }
    }
  };
}

/** The body as JSON, or as the text it is when it is not JSON; undefined when empty. */
function parseBody(text: string): unknown {
  if (!text) return undefined;
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
}

/** The stable code of an error: `{error: {code}}`, or the `code` of an Idempotency-Key problem document. */
export const errorCode = (body: unknown): string | undefined => {
  if (typeof body !== 'object' || body === null) return undefined;
  if ('error' in body) return (body as { error?: { code?: string } }).error?.code;
  return 'code' in body && typeof body.code === 'string' ? body.code : undefined;
};
