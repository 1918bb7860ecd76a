export interface Reply<T = unknown> {
  readonly status: number;
  readonly body: T;
}

export type Call = <T = unknown>(method: 'GET' | 'POST', path: string, body?: unknown, headers?: Record<string, string>) => Promise<Reply<T>>;

export interface ClientOptions {
  /** Per request; must exceed the longest `Prefer: wait` sent, or a long poll is cut short. */
  readonly timeoutMs?: number;
  readonly retries?: number;
  /** Called for every HTTP request sent, retries included (the producer's requests-per-step). */
  readonly onRequest?: () => void;
}

/**
 * A JSON client that sends an Idempotency-Key with every POST and, when a request times out, the
 * connection drops, the service answers 503, 409 CONCURRENT_UPDATE or 409 IDEMPOTENCY_KEY_IN_FLIGHT,
 * retries it with the SAME key: the server replays the first outcome instead of running the command
 * twice. A fresh key per retry is exactly the mistake this avoids.
 */
export function client(baseUrl: string, { timeoutMs = 10_000, retries = 5, onRequest }: ClientOptions = {}): Call {
  return async <T>(method: 'GET' | 'POST', path: string, body?: unknown, headers: Record<string, string> = {}): Promise<Reply<T>> => {
    const key = method === 'POST' ? crypto.randomUUID() : undefined;
    for (let attempt = 0; ; attempt++) {
      try {
        onRequest?.();
        const response = await fetch(`${baseUrl}${path}`, {
          method,
          headers: { ...(body !== undefined ? { 'content-type': 'application/json' } : {}), ...(key ? { 'idempotency-key': key } : {}), ...headers },
          body: body === undefined ? undefined : JSON.stringify(body),
          signal: AbortSignal.timeout(timeoutMs),
        });
        const text = await response.text();
        const parsed = (text ? JSON.parse(text) : undefined) as T;
        // 503: a dependency is briefly away. 409 IDEMPOTENCY_KEY_IN_FLIGHT: an earlier try with this
        // key is still running. Both say when to come back; the same request, same key, will be answered.
        if ((response.status === 503 || (response.status === 409 && errorCode(parsed) === 'IDEMPOTENCY_KEY_IN_FLIGHT')) && attempt < retries) {
          await new Promise((r) => setTimeout(r, Number(response.headers.get('retry-after') ?? 1) * 1000));
          continue;
        }
        // 409 CONCURRENT_UPDATE: the row kept changing while the command was decided, and nothing was applied.
        if (response.status === 409 && errorCode(parsed) === 'CONCURRENT_UPDATE' && attempt < retries) {
          await new Promise((r) => setTimeout(r, 50 * 2 ** attempt));
          continue;
        }
        return { status: response.status, body: parsed };
      } catch (error) {
        if (attempt >= retries) throw error;
        await new Promise((r) => setTimeout(r, 100 * 2 ** attempt));
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
