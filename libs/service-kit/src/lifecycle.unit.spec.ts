import { EventEmitter } from 'node:events';
import { captureLogs } from '@labelflow/testing';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { Lifecycle, runUntilSignal } from './lifecycle';

const capturingLogger = () => captureLogs({ service: 'lifecycle-spec', level: 'debug' });
const never = () => new Promise<void>(() => undefined);

afterEach(() => {
  vi.useRealTimers();
});

describe('closing a lifecycle', () => {
  it('closes resources in reverse order of opening', async () => {
    const { logger } = capturingLogger();
    const closed: string[] = [];
    const lifecycle = new Lifecycle(logger);
    for (const name of ['pool', 'producer', 'consumer']) lifecycle.onClose(name, async () => void closed.push(name));

    expect(await lifecycle.close()).toEqual({ unclosed: [] });
    expect(closed).toEqual(['consumer', 'producer', 'pool']);
  });

  it('goes on to the next resource when one hangs past its budget, and reports it', async () => {
    vi.useFakeTimers();
    const { logger, lines } = capturingLogger();
    const closed: string[] = [];
    const lifecycle = new Lifecycle(logger, { stepTimeoutMs: 1_000 });
    lifecycle.onClose('pool', async () => void closed.push('pool'));
    lifecycle.onClose('consumer', never);

    const closing = lifecycle.close();
    await vi.advanceTimersByTimeAsync(999);
    expect(closed).toEqual([]);
    await vi.advanceTimersByTimeAsync(1);

    expect(await closing).toEqual({ unclosed: [{ name: 'consumer', reason: 'timed out' }] });
    expect(closed).toEqual(['pool']);
    expect(lines.some((l) => l.msg === 'close timed out; closing the rest regardless' && l.resource === 'consumer')).toBe(true);
  });

  it('goes on past a resource whose close throws, synchronously or not', async () => {
    const { logger } = capturingLogger();
    const closed: string[] = [];
    const lifecycle = new Lifecycle(logger);
    lifecycle.onClose('pool', async () => void closed.push('pool'));
    lifecycle.add({
      name: 'redis',
      close: () => {
        throw new Error('already closed');
      },
    });
    lifecycle.onClose('relay', () => Promise.reject(new Error('send in flight')));

    expect(await lifecycle.close()).toEqual({
      unclosed: [
        { name: 'relay', reason: 'failed' },
        { name: 'redis', reason: 'failed' },
      ],
    });
    expect(closed).toEqual(['pool']);
  });

  it('closes once however often it is asked', async () => {
    const { logger } = capturingLogger();
    let closes = 0;
    const lifecycle = new Lifecycle(logger);
    lifecycle.onClose('pool', async () => void closes++);
    await Promise.all([lifecycle.close(), lifecycle.close()]);
    await lifecycle.close();
    expect(closes).toBe(1);
  });
});

describe('running until a signal', () => {
  const harness = () => {
    const signals = new EventEmitter();
    const exits: number[] = [];
    const { logger, lines } = capturingLogger();
    return { signals, exits, logger, lines, exit: (code: number) => void exits.push(code) };
  };

  it('closes everything and exits 0 on SIGTERM', async () => {
    const h = harness();
    const lifecycle = new Lifecycle(h.logger);
    let closed = false;
    lifecycle.onClose('pool', async () => void (closed = true));
    await runUntilSignal(h.logger, async () => lifecycle, { signals: h.signals, exit: h.exit });

    h.signals.emit('SIGTERM');
    await vi.waitFor(() => expect(h.exits).toEqual([0]));
    expect(closed).toBe(true);
  });

  it('keeps listening while it closes: a repeated or second signal is logged and the close goes on to exit 0 once', async () => {
    const h = harness();
    const lifecycle = new Lifecycle(h.logger);
    let release!: () => void;
    const slow = new Promise<void>((resolve) => (release = resolve));
    lifecycle.onClose('pool', () => slow);
    await runUntilSignal(h.logger, async () => lifecycle, { signals: h.signals, exit: h.exit });

    h.signals.emit('SIGINT');
    h.signals.emit('SIGTERM');
    h.signals.emit('SIGTERM');
    expect(h.signals.listenerCount('SIGTERM')).toBe(1);
    expect(h.lines.filter((l) => l.msg === 'already shutting down; the close goes on within its budget')).toHaveLength(2);
    release();
    await vi.waitFor(() => expect(h.exits).toEqual([0]));
  });

  it('exits 0 once, and never later as "took too long", when the shutdown ends within its budget', async () => {
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout'] });
    try {
      const h = harness();
      const lifecycle = new Lifecycle(h.logger);
      await runUntilSignal(h.logger, async () => lifecycle, { signals: h.signals, exit: h.exit, shutdownTimeoutMs: 1_000 });

      h.signals.emit('SIGTERM');
      await vi.advanceTimersByTimeAsync(5_000);

      expect(h.exits).toEqual([0]);
      expect(h.lines.filter((l) => l.msg === 'shutdown took too long; exiting')).toEqual([]);
    } finally {
      vi.useRealTimers();
    }
  });

  it('exits 1 and names what it left when a resource did not close', async () => {
    vi.useFakeTimers();
    const h = harness();
    const lifecycle = new Lifecycle(h.logger, { stepTimeoutMs: 100 });
    lifecycle.onClose('relay', never);
    await runUntilSignal(h.logger, async () => lifecycle, { signals: h.signals, exit: h.exit });

    h.signals.emit('SIGINT');
    await vi.advanceTimersByTimeAsync(100);
    expect(h.exits).toEqual([1]);
    expect(h.lines.find((l) => l.msg === 'shut down with resources left unclosed')?.unclosed).toEqual([{ name: 'relay', reason: 'timed out' }]);
  });

  it('closes what a slow start opened once it returns, when SIGTERM came during the start', async () => {
    const h = harness();
    const lifecycle = new Lifecycle(h.logger);
    let closed = false;
    lifecycle.onClose('consumer', async () => void (closed = true));
    let finishStart!: () => void;
    const started = new Promise<void>((resolve) => (finishStart = resolve));

    const running = runUntilSignal(h.logger, () => started.then(() => lifecycle), { signals: h.signals, exit: h.exit });
    h.signals.emit('SIGTERM');
    expect(h.exits).toEqual([]);
    finishStart();
    await running;

    expect(closed).toBe(true);
    expect(h.exits).toEqual([0]);
  });

  it('exits 1 when the shutdown as a whole outlasts its budget, as a start that never returns', async () => {
    vi.useFakeTimers();
    const h = harness();
    void runUntilSignal(h.logger, () => new Promise<Lifecycle>(() => undefined), { signals: h.signals, exit: h.exit, shutdownTimeoutMs: 2_000 });

    h.signals.emit('SIGTERM');
    await vi.advanceTimersByTimeAsync(1_999);
    expect(h.exits).toEqual([]);
    await vi.advanceTimersByTimeAsync(1);
    expect(h.exits).toEqual([1]);
    expect(h.lines.some((l) => l.msg === 'shutdown took too long; exiting')).toBe(true);
  });

  it('exits 1 with the reason when the start fails, and leaves the signals alone', async () => {
    const h = harness();
    await runUntilSignal(
      h.logger,
      async () => {
        throw Object.assign(new Error('config is invalid: PORT must be a number'), { code: 'CONFIG_INVALID', details: ['PORT'] });
      },
      { signals: h.signals, exit: h.exit },
    );

    expect(h.exits).toEqual([1]);
    expect(h.signals.listenerCount('SIGTERM')).toBe(0);
    expect(h.lines.find((l) => l.level === 60)?.msg).toBe('config is invalid: PORT must be a number');
  });

  it('exits 1 once when the start fails after a signal came during it, without a later "took too long"', async () => {
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout'] });
    const h = harness();
    await runUntilSignal(
      h.logger,
      async () => {
        h.signals.emit('SIGTERM');
        throw new Error('could not reach PostgreSQL');
      },
      { signals: h.signals, exit: h.exit, shutdownTimeoutMs: 1_000 },
    );
    await vi.advanceTimersByTimeAsync(5_000);

    expect(h.exits).toEqual([1]);
    expect(h.lines.filter((l) => l.msg === 'shutdown took too long; exiting')).toEqual([]);
  });
});
