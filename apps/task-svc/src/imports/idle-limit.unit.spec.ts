import { setTimeout as sleep } from 'node:timers/promises';
import { describe, expect, it } from 'vitest';
import { withIdleLimit } from './idle-limit';

async function* chunks(...gapsMs: number[]): AsyncGenerator<string> {
  for (const [i, gap] of gapsMs.entries()) {
    await sleep(gap);
    yield `chunk ${i}`;
  }
}

describe('an upload read with an idle limit', () => {
  it('does not count the time the import spends on a chunk as the client being silent', async () => {
    let idle = 0;
    const read: string[] = [];
    for await (const chunk of withIdleLimit(chunks(0, 0, 0), 50, () => idle++)) {
      read.push(String(chunk));
      // A batch being written: longer than the idle limit, while the client has the next chunk ready.
      await sleep(120);
    }
    expect(read).toEqual(['chunk 0', 'chunk 1', 'chunk 2']);
    expect(idle).toBe(0);
  });

  it('ends in an error, and says so, when the client sends nothing for the idle limit', async () => {
    let idle = 0;
    const read: string[] = [];
    const reading = (async () => {
      for await (const chunk of withIdleLimit(chunks(0, 500), 50, () => idle++)) read.push(String(chunk));
    })();
    await expect(reading).rejects.toThrow('the client sent nothing for 50 ms');
    expect(read).toEqual(['chunk 0']);
    expect(idle).toBe(1);
  });
});
