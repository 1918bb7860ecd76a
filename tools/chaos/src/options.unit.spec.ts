import { describe, expect, it } from 'vitest';
import { chaosDefaults, parseChaosArgs, type ChaosOptions } from './options';

const at = { repoRoot: '/repo', stamp: '2026-03-01T12-00-00-000Z' };
const problems = (argv: string[]): readonly string[] => {
  const parsed = parseChaosArgs(argv, at);
  if (parsed.help) throw new Error('unexpected --help');
  return parsed.problems;
};
const options = (argv: string[]): ChaosOptions => {
  const parsed = parseChaosArgs(argv, at);
  if (parsed.help || !('options' in parsed)) throw new Error(`refused: ${parsed.help ? '--help' : parsed.problems.join('; ')}`);
  return parsed.options;
};

describe('the chaos command line (parseChaosArgs)', () => {
  it('runs 1000 tasks with 30% duplicates on seed 42 and the defaults for that size when given nothing', () => {
    expect(options([])).toEqual({ ...chaosDefaults(1_000), tasks: 1_000, duplicates: 0.3, seed: 42, logDir: '/repo/.local/chaos/2026-03-01T12-00-00-000Z-seed42' });
    expect(options(['--fault-window', '0.1-0.5', '--redis-outage-s', '2.5', '--cancel', '0']).window).toEqual([0.1, 0.5]);
    expect(parseChaosArgs(['--help', '--seed', ''], at)).toEqual({ help: true });
  });

  it('refuses an empty or non-numeric seed, share or rate instead of reading it as 0', () => {
    expect(problems(['--seed', ''])).toEqual(['--seed must be a number, got ""']);
    expect(problems(['--duplicates', ' ', '--cancel', 'none'])).toEqual(['--duplicates must be a number, got " "', '--cancel must be a number, got "none"']);
    expect(problems(['--tasks', '0x10'])).toEqual(['--tasks must be a number, got "0x10"']);
  });

  it('refuses an empty fault window instead of falling back to the default, and a third bound instead of cutting it off', () => {
    expect(problems(['--fault-window', ''])).toEqual(['--fault-window must be two fractions FROM-TO, e.g. 0.05-0.8, got ""']);
    expect(problems(['--fault-window', '0.1-0.5-0.9'])).toEqual(['--fault-window must be two fractions FROM-TO, e.g. 0.05-0.8, got "0.1-0.5-0.9"']);
    expect(problems(['--fault-window', '0.5-0.1'])).toEqual(['the fault window must be 0 <= from < to <= 1, got 0.5-0.1']);
  });

  it('refuses a review SLA that is not a whole number of milliseconds, and an empty output path', () => {
    expect(problems(['--qa-sla-ms', '1500.5'])).toEqual(['--qa-sla-ms must be an integer >= 1000, got 1500.5']);
    expect(problems(['--qa-sla-ms', '999'])).toEqual(['--qa-sla-ms must be an integer >= 1000, got 999']);
    expect(problems(['--log-dir', '', '--json-out', ''])).toEqual(['--log-dir must name a file or directory, got ""', '--json-out must name a file or directory, got ""']);
  });

  it('refuses an unknown option, naming it', () => {
    expect(problems(['--task', '5'])).toEqual([expect.stringMatching(/^Unknown option '--task'/)]);
  });
});
