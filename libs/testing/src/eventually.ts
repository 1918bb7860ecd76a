/**
 * Thrown by a probe to end the wait at once: an answer no amount of waiting makes right (a 5xx, a
 * refusal), which a retry would otherwise hide until the condition happened to hold.
 */
export class GiveUp extends Error {
  override readonly name = 'GiveUp';
}

/**
 * Polls `probe` until it stops throwing (or throws GiveUp) and returns its value. This waits for a condition to
 * become true (an event to be consumed), never for a fixed time: on timeout the last failure is
 * rethrown so the test says what never happened.
 */
export async function eventually<T>(probe: () => Promise<T> | T, { timeoutMs = 30_000, intervalMs = 100 } = {}): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let lastError: unknown;
  for (;;) {
    // A probe that hangs must not outlive the deadline: it races the time left.
    let timer: NodeJS.Timeout | undefined;
    const overdue = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`the probe itself took longer than the ${timeoutMs} ms allowed`)), Math.max(0, deadline - Date.now()));
    });
    try {
      return await Promise.race([Promise.resolve().then(probe), overdue]);
    } catch (error) {
      if (error instanceof GiveUp) throw error;
      lastError = error;
    } finally {
      clearTimeout(timer);
    }
    if (Date.now() > deadline) {
      const message = lastError instanceof Error ? lastError.message : String(lastError);
      throw new Error(`condition not met within ${timeoutMs} ms: ${message}`, { cause: lastError });
    }
    await new Promise((r) => setTimeout(r, intervalMs));
  }
}
