export interface Reply<T = unknown> {
  readonly status: number;
  readonly body: T;
}

export type Call = <T = unknown>(method: 'GET' | 'POST', path: string, body?: unknown, headers?: Record<string, string>) => Promise<Reply<T>>;

/**
 * A JSON client that sends an Idempotency-Key with every POST and, when a request times out, the
 * connection drops, the service answers 503 or 409 CONCURRENT_UPDATE, retries it with the SAME key:
 * the server replays the first outcome instead of running the command twice. A fresh key per retry
 * is exactly the mistake this avoids.
 */
export function client(baseUrl: string, { timeoutMs = 10_000, retries = 5 } = {}): Call {
  return async <T>(method: 'GET' | 'POST', path: string, body?: unknown, headers: Record<string, string> = {}): Promise<Reply<T>> => {
    const key = method === 'POST' ? crypto.randomUUID() : undefined;
    for (let attempt = 0; ; attempt++) {
      try {
        const response = await fetch(`${baseUrl}${path}`, {
          method,
          headers: { ...(body !== undefined ? { 'content-type': 'application/json' } : {}), ...(key ? { 'idempotency-key': key } : {}), ...headers },
          body: body === undefined ? undefined : JSON.stringify(body),
          signal: AbortSignal.timeout(timeoutMs),
        });
        const text = await response.text();
        const parsed = (text ? JSON.parse(text) : undefined) as T;
        // 503: a dependency is briefly away. 409 CONCURRENT_UPDATE: the row kept changing while the
        // command was decided, and nothing was applied. Either way the same request, same key, will be answered.
        if (response.status === 503 && attempt < retries) {
          await new Promise((r) => setTimeout(r, Number(response.headers.get('retry-after') ?? 1) * 1000));
          continue;
        }
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

const errorCode = (body: unknown): string | undefined =>
  typeof body === 'object' && body !== null && 'error' in body ? (body as { error?: { code?: string } }).error?.code : undefined;
