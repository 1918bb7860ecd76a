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
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
/** `Retry-After` in seconds (the services send whole seconds), as milliseconds. */
const retryAfterMs = (response: Response, fallbackS = 1) => {
  const seconds = Number(response.headers.get('retry-after'));
  return (Number.isFinite(seconds) && seconds >= 0 ? seconds : fallbackS) * 1000;
};

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
export function client(baseUrl: string, { timeoutMs = 10_000, retries = 5, authorization, rateLimitWaitMs = 120_000, onRequest, onRateLimited }: ClientOptions = {}): Call {
  return async <T>(method: 'GET' | 'POST', path: string, body?: unknown, headers: Record<string, string> = {}): Promise<Reply<T>> => {
    const key = method === 'POST' ? crypto.randomUUID() : undefined;
    let limitedMs = 0;
    for (let attempt = 0; ; ) {
      try {
        const auth = authorization ? { authorization: await authorization() } : undefined;
        onRequest?.();
        const response = await fetch(`${baseUrl}${path}`, {
          method,
          headers: { ...(body !== undefined ? { 'content-type': 'application/json' } : {}), ...(key ? { 'idempotency-key': key } : {}), ...auth, ...headers },
          body: body === undefined ? undefined : JSON.stringify(body),
          signal: AbortSignal.timeout(timeoutMs),
        });
        const text = await response.text();
        const parsed = (text ? JSON.parse(text) : undefined) as T;
        if (response.status === 429 && errorCode(parsed) === 'RATE_LIMITED' && limitedMs < rateLimitWaitMs) {
          onRateLimited?.();
          const wait = retryAfterMs(response) + Math.floor(Math.random() * 250);
          limitedMs += wait;
          await sleep(wait);
          continue;
        }
        // 503: a dependency is briefly away. 409 IDEMPOTENCY_KEY_IN_FLIGHT: an earlier try with this
        // key is still running. Both say when to come back; the same request, same key, will be answered.
        if ((response.status === 503 || (response.status === 409 && errorCode(parsed) === 'IDEMPOTENCY_KEY_IN_FLIGHT')) && attempt < retries) {
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
      } catch (error) {
        if (attempt >= retries) throw error;
        await sleep(100 * 2 ** attempt++);
      }
    }
  };
}

/** The stable code of an error: `{error: {code}}`, or the `code` of an Idempotency-Key problem document. */
export const errorCode = (body: unknown): string | undefined => {
  if (typeof body !== 'object' || body === null) return undefined;
  if ('error' in body) return (body as { error?: { code?: string } }).error?.code;
  return 'code' in body && typeof body.code === 'string' ? body.code : undefined;
};
