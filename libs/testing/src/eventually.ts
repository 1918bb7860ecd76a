/**
 * Polls `probe` until it stops throwing and returns its value. This waits for a condition to
 * become true (an event to be consumed), never for a fixed time: on timeout the last failure is
 * rethrown so the test says what never happened.
 */
export async function eventually<T>(probe: () => Promise<T> | T, { timeoutMs = 30_000, intervalMs = 100 } = {}): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let lastError: unknown;
  for (;;) {
    try {
      return await probe();
    } catch (error) {
      lastError = error;
    }
    if (Date.now() > deadline) {
      const message = lastError instanceof Error ? lastError.message : String(lastError);
      throw new Error(`condition not met within ${timeoutMs} ms: ${message}`, { cause: lastError });
    }
    await new Promise((r) => setTimeout(r, intervalMs));
  }
}
