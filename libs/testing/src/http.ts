import { GiveUp } from './eventually';
import { ADMIN, tokenFor, type TestIdentity } from './identity';

export interface HttpResult<T = unknown> {
  readonly status: number;
  readonly body: T;
  readonly headers: Headers;
}

export interface HttpClientOptions {
  /**
   * `fail` (the default): a 5xx answer throws GiveUp, which also ends an `eventually` at once, so
   * no poll retries through a server error. `return`: hand it back, for a test of the failure
   * answers themselves (a 503 while a dependency is down, `/readyz` while not ready).
   */
  readonly serverErrors?: 'fail' | 'return';
}

/**
 * A tiny JSON client for tests and scripts against a service's base URL, acting as `identity`
 * (a bearer token for it on every request; `null`: no token at all).
 */
export function httpClient(baseUrl: string, identity: TestIdentity | null = ADMIN, options: HttpClientOptions = {}) {
  const call = async <T>(method: string, path: string, body?: unknown, headers: Record<string, string> = {}): Promise<HttpResult<T>> => {
    const auth: Record<string, string> = identity ? { authorization: `Bearer ${await tokenFor(identity)}` } : {};
    const init: RequestInit = { method, headers: { ...auth, ...headers } };
    if (body !== undefined) {
      init.body = typeof body === 'string' ? body : JSON.stringify(body);
      (init.headers as Record<string, string>)['content-type'] = 'application/json';
    }
    const response = await fetch(`${baseUrl}${path}`, init);
    const text = await response.text();
    let parsed: unknown = text;
    try {
      parsed = text ? JSON.parse(text) : undefined;
    } catch {
      // Not JSON (e.g. /metrics): hand back the text.
    }
    if (response.status >= 500 && options.serverErrors !== 'return') throw new GiveUp(`${method} ${baseUrl}${path} answered ${response.status}: ${text.slice(0, 500)}`);
    return { status: response.status, body: parsed as T, headers: response.headers };
  };
  return {
    get: <T = unknown>(path: string, headers?: Record<string, string>) => call<T>('GET', path, undefined, headers),
    post: <T = unknown>(path: string, body?: unknown, headers?: Record<string, string>) => call<T>('POST', path, body, headers),
    /** The same service as someone else. */
    as: (other: TestIdentity | null) => httpClient(baseUrl, other, options),
  };
}
export type HttpClient = ReturnType<typeof httpClient>;
