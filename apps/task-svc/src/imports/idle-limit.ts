/**
 * The request's chunks, ending in an error when the client sends nothing for `idleMs`. Only the
 * wait for the next chunk counts: while the import writes a batch it reads nothing, and that time
 * is its own, not the client's silence.
 */
export async function* withIdleLimit(source: AsyncIterable<Buffer | string>, idleMs: number, onIdle: () => void): AsyncGenerator<Buffer | string> {
  const chunks = source[Symbol.asyncIterator]();
  let done = false;
  try {
    for (;;) {
      let timer: NodeJS.Timeout | undefined;
      const silent = new Promise<never>((_resolve, reject) => {
        timer = setTimeout(() => {
          onIdle();
          reject(new Error(`the client sent nothing for ${idleMs} ms`));
        }, idleMs);
      });
      let next: IteratorResult<Buffer | string>;
      try {
        next = await Promise.race([chunks.next(), silent]);
      } finally {
        // Before the yield: while the consumer works on the chunk (a batch being written), the
        // generator is paused inside this loop, and the client is not the one keeping it waiting.
        clearTimeout(timer);
      }
      if (next.done) {
        done = true;
        return;
      }
      yield next.value;
    }
  } finally {
    // Left early (a refusal mid-file): the request stream is let go, as a for-await over it would.
    if (!done) await chunks.return?.();
  }
}
