import { describe, expect, it } from 'vitest';
import { captureLogs } from '@labelflow/testing';
import { Lifecycle } from '../lifecycle';
import { schedule } from './schedule';

describe('a scheduled job', () => {
  it('is stopped between its rounds when the service closes, and the close waits for the round under way', async () => {
    const { logger, lines } = captureLogs({ service: 'schedule-test', level: 'info' });
    const lifecycle = new Lifecycle(logger);
    let rounds = 0;
    let ended = false;
    let release!: () => void;
    const roundGoing = new Promise<void>((resolve) => (release = resolve));
    let started!: () => void;
    const going = new Promise<void>((resolve) => (started = resolve));
    schedule(lifecycle, 'prune', 3_600_000, async (signal) => {
      // A prune that loops over chunks until none is left; one chunk is in flight when the close comes.
      while (!signal.aborted) {
        rounds++;
        started();
        await roundGoing;
      }
      ended = true;
      throw new Error('Cannot use a pool after calling end on the pool');
    }, logger);
    await going;
    const closing = lifecycle.close();
    // The close has aborted the job and waits for its chunk: it ends only once the chunk is done.
    expect(ended).toBe(false);
    release();
    await closing;
    expect([rounds, ended]).toEqual([1, true]);
    // What a job throws once it was told to stop is the shutdown's doing, not a failure to report.
    expect(lines.filter((r) => r['msg'] === 'scheduled job failed')).toEqual([]);
  });

  it('logs a failed round and runs again at its next turn', async () => {
    const { logger, lines } = captureLogs({ service: 'schedule-test', level: 'info' });
    const lifecycle = new Lifecycle(logger);
    let runs = 0;
    let twice!: () => void;
    const ranTwice = new Promise<void>((resolve) => (twice = resolve));
    schedule(lifecycle, 'flaky', 10, async () => {
      if (++runs === 2) twice();
      if (runs === 1) throw new Error('database away');
    }, logger);
    await ranTwice;
    await lifecycle.close();
    expect(lines.filter((r) => r['msg'] === 'scheduled job failed').map((r) => r['job'])).toEqual(['flaky']);
  });
});
